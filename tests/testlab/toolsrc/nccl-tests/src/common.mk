# gpulab test lab stand-in: the variables of nccl-tests' common.mk. nvcc must be there and answer
# --version as the real build asks it (the stand-in nvcc compiles nothing, so the C compiler builds).
CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(CUDA_HOME)/bin/nvcc
CUDA_VERSION = $(strip $(shell which $(NVCC) >/dev/null && $(NVCC) --version | grep release | sed 's/.*release //' | sed 's/\,.*//'))
ifeq ($(CUDA_VERSION),)
$(error no CUDA compiler: $(NVCC) does not answer --version (set CUDA_HOME))
endif
CFLAGS := -O2 -DCUDA_VERSION_STRING=\"$(CUDA_VERSION)\"
