/* gpulab test lab stand-in for nccl-tests' common.h: its version. */
#ifndef NCCL_TESTS_COMMON_H_
#define NCCL_TESTS_COMMON_H_
#define NCCL_TESTS_VERSION "@VERSION@"
#endif
