// Encoder models for sequence classification: BERT (post-LN, learned positions, token types,
// erf GELU, pooler) and DistilBERT (no token types, pre_classifier + ReLU head), chosen from a
// Hugging Face config.json's model_type and loaded from Hugging Face safetensors names.
//
// The finetune pipeline codes against these declarations (models/encoder_model.h and
// src/checkpoint/encoder_weights.cpp implement them).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "mixtrain/models/model.h"
#include "mixtrain/tensor/memory.h"

namespace mixtrain {

enum class Pooling { cls, mean };  // cls: BERT's pooler on [CLS]; mean: masked mean of the last layer

struct ClassifierOptions {
  std::vector<std::string> labels;  // class id -> label name (num_labels = labels.size() >= 2)
  Pooling pooling = Pooling::cls;
  // Dropout while training, everywhere Hugging Face drops: embeddings, attention probabilities,
  // hidden states, before the classifier. Replaces config.json's hidden_dropout_prob,
  // attention_probs_dropout_prob and classifier dropout (0 turns all of them off).
  float dropout = 0.1f;
  uint64_t seed = 1337;  // initialises the head when the directory has none
};

// Loads `dir` (config.json + model.safetensors, as Hugging Face writes them: a bare encoder such
// as all-MiniLM-L6-v2, or a *ForSequenceClassification saved by save_encoder_classifier) and
// returns a Model whose forward_batch takes a classification Batch (data/data_source.h) and gives
// logits (B, K) and the mean cross-entropy over rows whose target is not -1. The parameters are
// allocated in `dtype` with gradients in `grad_dtype` (MixedPrecision's param_dtype/grad_dtype).
// IoError / ArgumentError naming the file and the tensor or key for anything missing or wrong.
// A quantized directory (`mixtrain quantize`: config.json's quantization_config) loads with its
// quantized weights as codes and scales; it is for inference: gradients must be false (IoError
// otherwise). gradients false: no gradient buffers (classify, evaluation).
std::unique_ptr<Model> load_encoder_classifier(const std::string& dir, const ClassifierOptions& options,
                                               DType dtype = DType::f32, DType grad_dtype = DType::f32,
                                               MemCategory param_category = MemCategory::parameters,
                                               bool gradients = true);

// What a loaded encoder classifier is (for callers that hold it as a Model: the tokenizer's vocab
// must match vocab_size, sequences are at most max_positions long). ArgumentError when `model`
// is not from load_encoder_classifier.
struct EncoderInfo {
  std::string family;  // "bert" or "distilbert"
  int64_t vocab_size = 0;
  int64_t max_positions = 0;  // max_position_embeddings: the longest sequence
  int64_t hidden = 0, layers = 0, heads = 0;
  std::vector<std::string> labels;  // class id -> label
  Pooling pooling = Pooling::cls;
};
EncoderInfo encoder_info(const Model& model);

// The options a saved classifier was trained with, from `dir`/config.json: labels from id2label
// (in class-id order; empty when the file has none, e.g. a bare encoder such as MiniLM), pooling
// from "mixtrain_pooling" (cls when absent); dropout and seed keep their defaults. IoError naming
// the file and the key when id2label is malformed (not an object of "0".."K-1" -> string).
ClassifierOptions saved_classifier_options(const std::string& dir);
// Whether `dir`/config.json describes a quantized model (a quantization_config, `mixtrain
// quantize`); IoError as load_encoder_classifier for a malformed one.
bool is_quantized_model_dir(const std::string& dir);

// Writes `model` (from load_encoder_classifier) to `dir` as Hugging Face's
// BertForSequenceClassification / DistilBertForSequenceClassification: model.safetensors,
// config.json (with id2label / label2id) and the tokenizer files copied from `tokenizer_dir`, so
// transformers' from_pretrained(dir) loads it. A quantized model (from a quantized directory, or
// made by quantize_model, train/quantize.h) is written with its codes and scales as
// compressed-tensors names them (<layer>.weight, <layer>.weight_scale) and a quantization_config.
void save_encoder_classifier(const Model& model, const std::string& dir, const std::string& tokenizer_dir);

}  // namespace mixtrain
