# Data: tokenizers, token shards, the distributed sampler.
cohort_test(engine_token_shards_test SOURCES token_shards_test.cc
            LIBS cohort_engine_data LABELS engine)
cohort_test(engine_sampler_test SOURCES sampler_test.cc
            LIBS cohort_engine_data LABELS engine)
cohort_test(engine_tokenizer_test SOURCES tokenizer_test.cc
            LIBS cohort_engine_data LABELS engine)
