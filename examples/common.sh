# common.sh - sourced by the examples' run.sh: the repository root, the
# stepgraph binary, the output directory and the size (EXAMPLE_SIZE=ci: small).
set -euo pipefail
EXAMPLE_DIR=$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)
REPO_ROOT=$(cd "$EXAMPLE_DIR/../.." && pwd)
STEPGRAPH=${STEPGRAPH:-$REPO_ROOT/stepgraph}
OUT=${OUT:-$EXAMPLE_DIR/out}
EXAMPLE_SIZE=${EXAMPLE_SIZE:-full}
PY=${SYSTEM_PYTHON:-python3}
case "$EXAMPLE_SIZE" in full | ci) ;; *) echo "EXAMPLE_SIZE must be full or ci" >&2; exit 2 ;; esac
[ -x "$STEPGRAPH" ] || { echo "example: build stepgraph first (no $STEPGRAPH)" >&2; exit 2; }
mkdir -p "$OUT"
# the examples' StarPU calibration stays with their outputs
export STARPU_HOME=${STARPU_HOME:-$OUT/starpu}
mkdir -p "$STARPU_HOME"
ci() { [ "$EXAMPLE_SIZE" = ci ]; }
say() { printf '\n== %s\n' "$*"; }
# hf_llama_config FILE: config.json as transformers writes it for the small
# Llama of the fine-tuning examples (hidden 128, 4 layers, vocabulary 512)
hf_llama_config() {
	cat >"$1" <<'JSON'
{
  "architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "hidden_size": 128,
  "intermediate_size": 384,
  "num_hidden_layers": 4,
  "num_attention_heads": 4,
  "num_key_value_heads": 2,
  "head_dim": 32,
  "vocab_size": 512,
  "max_position_embeddings": 1024,
  "rms_norm_eps": 1e-05,
  "rope_theta": 10000.0,
  "rope_scaling": null,
  "tie_word_embeddings": false,
  "attention_bias": false,
  "attention_dropout": 0.0,
  "mlp_bias": false,
  "hidden_act": "silu",
  "initializer_range": 0.02,
  "bos_token_id": null,
  "eos_token_id": 0,
  "torch_dtype": "float32",
  "use_cache": true
}
JSON
}
