#!/bin/sh
# Stand-in for nvcc {{ nvcc_version }} (gpulab test lab; it compiles nothing).
case "$1" in
  --version|-V)
    cat <<'VERSION'
nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-{{ nvcc_year }} NVIDIA Corporation
Built on {{ nvcc_built }}
Cuda compilation tools, release {{ cuda_short }}, V{{ nvcc_version }}
{%- if nvcc_build is defined %}
Build {{ nvcc_build }}
{%- endif %}
VERSION
    exit 0 ;;
esac
echo "nvcc fatal   : No input files specified; use option --help for more information" >&2
exit 1
