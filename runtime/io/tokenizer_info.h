/* tokenizer_info.h - which tokenizer made a directory of token shards.
 *
 * scripts/tokenize_data.py writes DIR/tokenizer-info.json beside the shards it
 * makes: {"tokenizer": FILE-NAME, "sha256": HEX, "vocab_size": N, ...}. The
 * trainer reads it to say which tokenizer the data comes from and to warn when
 * its vocabulary is not the model's.
 */
#ifndef SG_TOKENIZER_INFO_H
#define SG_TOKENIZER_INFO_H

#include <stdint.h>

#include "common/error.h"

#define SG_TOKENIZER_INFO_FILE "tokenizer-info.json"

typedef struct sg_tokenizer_info {
    char path[4096];     /* the side file read */
    char tokenizer[128]; /* the tokenizer.json's file name */
    char sha256[65];     /* of the tokenizer.json, hex */
    int64_t vocab_size;
} sg_tokenizer_info;

/* Reads the side file in the directory of shard_path: 1 when there is one
 * (ti filled), 0 when there is none, SG_EINVAL when it is malformed (the
 * message names the file and the key). */
int sg_tokenizer_info_read(const char *shard_path, sg_tokenizer_info *ti, sg_error *err);

/* A model given as a Hugging Face directory brings its own tokenizer
 * (tokenizer.json, or SentencePiece's tokenizer.model). Training such a model
 * on raw text would feed it bytes as token ids, silently ignoring that
 * tokenizer: when model_path is a directory holding one and text_path (a
 * data file the loader reads as bytes) is given, SG_EINVAL with the command
 * that tokenizes the text (scripts/tokenize.sh). 0 otherwise. */
int sg_tokenizer_check_text_data(const char *model_path, const char *text_path, sg_error *err);

#endif /* SG_TOKENIZER_INFO_H */
