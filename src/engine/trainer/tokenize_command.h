// `cohort tokenize`: turns text into token shards for `cohort train` (data.train/data.val).
//
// Reads a text file, a directory of text files or a glob (as data.text does), tokenizes
// it (byte-level, or GPT-2 BPE with --vocab/--merges), and writes llm.c .bin shards of at
// most --shard-tokens tokens: <out>/val_000000.bin holds the last --val-fraction of the
// tokens, <out>/train_000000.bin, train_000001.bin, ... the rest. Each shard is written
// atomically. Exit codes as the CLI's (0, 1, 2 bad usage or input). Main thread.
#pragma once

#include "common/external_command.h"

namespace cohort::engine {

ExternalCommand TokenizeCommand();

}  // namespace cohort::engine
