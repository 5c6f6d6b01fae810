// Where mixtrain finds its built-in data: the fortunes corpus (TextCorpus::default_corpus_path)
// and the fine-tuning assets that scripts/setup_data.sh installs (the MiniLM weights, the Fine
// Foods reviews). The build links build/data/{models,finefoods} to the repository's data/.
#pragma once
#include <string>

namespace mixtrain {

// The built-in file or folder `relative` (e.g. "finefoods/train.tsv",
// "models/all-minilm-l6-v2"): $MIXTRAIN_DATA_DIR/relative when MIXTRAIN_DATA_DIR is set (and
// only there); else the first that exists of <directory of the executable>/data/relative,
// <directory of the executable>/../share/mixtrain/relative and ./build/data/relative. Throws
// IoError naming where it looked and saying to run scripts/setup.sh when none exists.
std::string builtin_data_path(const std::string& relative);

// The default model folder (config.json, model.safetensors, vocab.txt, tokenizer.json).
inline constexpr const char* kDefaultEncoderModel = "models/all-minilm-l6-v2";

}  // namespace mixtrain
