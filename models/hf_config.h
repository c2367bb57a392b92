/* hf_config.h - a Hugging Face config.json read as a model description.
 *
 * transformers writes a model's dimensions under the names stepgraph's model
 * files use (hidden_size, num_key_value_heads, rope_scaling...) plus keys of
 * its own: "model_type" (the architecture), "architectures", "torch_dtype",
 * token ids, "use_cache"... sg_hf_config_normalize rewrites such a JSON object
 * in place into a stepgraph model description: it sets "name" and
 * "architecture", checks the transformers keys that change the math
 * (hidden_act, attention_dropout, mlp_bias, use_sliding_window, the MoE
 * routing keys) and refuses what stepgraph does not compute, drops the keys
 * that do not matter for training, and removes unknown keys, listing them
 * for a warning. model_parse.c then reads the object as any model file.
 */
#ifndef SG_HF_CONFIG_H
#define SG_HF_CONFIG_H

#include <stddef.h>

#include "common/error.h"

struct cJSON;

/* 1 when root is a transformers config (it has "model_type" and no
 * "architecture"). */
int sg_hf_config_detect(const struct cJSON *root);

/* Rewrites root (see above). origin is the file's path: the model's name is
 * "_name_or_path"'s last component, else the name of the directory holding
 * origin. ignored receives the removed unknown keys, comma-separated ("" when
 * none; truncated with "..."). Errors name origin, the key and the value. */
int sg_hf_config_normalize(struct cJSON *root, const char *origin, char *ignored,
                           size_t ignored_size, sg_error *err);

struct sg_model;

/* The config.json transformers would write for model m (what its
 * from_pretrained reads back as the same architecture), with "torch_dtype"
 * torch_dtype ("float32", "bfloat16"); reading it back with sg_model_parse
 * gives m again. *out is malloc'ed text. Models transformers cannot express
 * (an o_proj bias without q/k/v biases outside Seed-OSS, a rope_scaling type
 * other than llama3) are refused. */
int sg_hf_config_text(const struct sg_model *m, const char *torch_dtype, char **out, sg_error *err);

#endif /* SG_HF_CONFIG_H */
