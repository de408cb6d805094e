#!/bin/sh
# Prints what a Cohort task knows about its place in the job (the job contract, DESIGN.md).
echo "rank ${RANK}/${WORLD_SIZE} on ${COHORT_NODE} (node rank ${NODE_RANK}, local rank ${LOCAL_RANK} of ${LOCAL_WORLD_SIZE}): GPUs [${CUDA_VISIBLE_DEVICES}], master ${MASTER_ADDR}:${MASTER_PORT}, job ${COHORT_JOB_ID} attempt ${COHORT_ATTEMPT}"
