/* gpulab test lab stand-in for nccl-tests' all_reduce_perf (no GPU, no NCCL): it takes the real
 * options (-b -e -f -g -J ...), prints the real banner and table and writes the -J results file in
 * the real form, for the GPUs /etc/gpulab-testlab/fake-gpus.json ($GPULAB_FAKE_GPUS) lists. Without
 * that file it fails as the real tool does on a host without a GPU. Figures: busbw rises with the
 * message size to 40 GB/s, or $GPULAB_FAKE_BUSBW GB/s. $GPULAB_FAKE_NWRONG=N: the data check finds N
 * wrong elements at the middle size, and the tool ends as nccl-tests 2.19 does then (the footer says
 * FAILED, the JSON's out_of_bounds is not okay, TESTCHECK's line, exit 7: testNumResults). Its output
 * follows tests/samples/nccl-tests (SOURCE.md there: booleans as the strings "true"/"false", doubles
 * by %lf, the errors list). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <nccl.h>
#include "common.h"

static long parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end);
  switch (*end) {
    case 'G': case 'g': v *= 1024.0;  /* fall through */
    case 'M': case 'm': v *= 1024.0;  /* fall through */
    case 'K': case 'k': v *= 1024.0; break;
  }
  return (long)v;
}

static int fake_gpus(void) {
  const char *path = getenv("GPULAB_FAKE_GPUS") ? getenv("GPULAB_FAKE_GPUS") : "/etc/gpulab-testlab/fake-gpus.json";
  FILE *f = fopen(path, "r");
  char buf[65536];
  size_t n;
  int count = 0;
  if (!f) return 0;
  n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = 0;
  for (char *p = buf; (p = strstr(p, "\"name\"")) != NULL; p++) count++;
  return count;
}

static void stamp(char *out, size_t len) {
  time_t t = time(NULL);
  strftime(out, len, "%Y-%m-%d %H:%M:%S", localtime(&t));
}

int main(int argc, char **argv) {
  long minb = 32L << 20, maxb = 32L << 20, factor = 0;
  int ngpus = 1, iters = 20, warmup = 1, check = 1;
  const char *json = NULL, *bw_env = getenv("GPULAB_FAKE_BUSBW");
  long nwrong = getenv("GPULAB_FAKE_NWRONG") ? atol(getenv("GPULAB_FAKE_NWRONG")) : 0;
  int errors = 0;
  char host[256], start[32], end[32];
  int opt;
  while ((opt = getopt(argc, argv, "t:g:b:e:i:f:n:w:c:J:o:d:r:m:N:a:I:K:")) != -1) {
    switch (opt) {
      case 'g': ngpus = atoi(optarg); break;
      case 'b': minb = parse_size(optarg); break;
      case 'e': maxb = parse_size(optarg); break;
      case 'f': factor = atol(optarg); break;
      case 'n': iters = atoi(optarg); break;
      case 'w': warmup = atoi(optarg); break;
      case 'c': check = atoi(optarg); break;
      case 'J': json = optarg; break;
      default: break;
    }
  }
  gethostname(host, sizeof(host));
  if (ngpus < 1 || ngpus > fake_gpus()) {
    printf("%s: Test CUDA failure common.cu:1100 '%s'\n .. %s pid %d: Test failure common.cu:1218\n", host,
           fake_gpus() ? "invalid device ordinal" : "no CUDA-capable device is detected", host, (int)getpid());
    return 1;
  }
  stamp(start, sizeof(start));
  printf("# nccl-tests version %s nccl-headers=%d nccl-library=%d\n", NCCL_TESTS_VERSION, NCCL_VERSION_CODE,
         NCCL_VERSION_CODE);
  printf("# Collective test starting: all_reduce_perf\n");
  printf("# nThread 1 nGpus %d minBytes %ld maxBytes %ld step: %ld(%s) warmup iters: %d iters: %d agg iters: 1 "
         "validation: %d graph: 0 unalign: 0\n#\n# Using devices\n", ngpus, minb, maxb, factor > 1 ? factor : 1048576L,
         factor > 1 ? "factor" : "bytes", warmup, iters, check);
  for (int g = 0; g < ngpus; g++)
    printf("#  Rank %2d Group  0 Pid %6d on %10s device  %d [0000:%02x:00] Tesla T4\n", g, (int)getpid(), host, g, 0x1b + g);
  printf("#\n#                                                              out-of-place                       in-place\n"
         "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong\n"
         "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)\n");
  FILE *out = json ? fopen(json, "w") : NULL;
  if (json && !out) { perror(json); return 1; }
  if (out) {
    fprintf(out, "{\"version\":3,\"start_time\":\"%s\",\"args\":[", start);
    for (int i = 0; i < argc; i++) fprintf(out, "%s\"%s\"", i ? "," : "", argv[i]);
    fprintf(out, "],\"env\":[],\"nccl_version\":%d,\"config\":{\"nthreads\":1,\"ngpus\":%d,\"minimum_bytes\":%ld,"
            "\"maximum_bytes\":%ld,\"step_factor\":%ld,\"warmup_iters\":%d,\"iterations\":%d,\"aggregated_iterations\":1,"
            "\"validation\":%d,\"graph\":0,\"blocking_collectives\":\"false\",\"per_iter_timing\":\"false\","
            "\"per_iter_skip\":0,\"parallel_init\":\"false\",\"devices\":[]},\"results\":[", NCCL_VERSION_CODE, ngpus,
            minb, maxb, factor,
            warmup, iters, check);
  }
  double sum = 0, top = bw_env ? atof(bw_env) : 40.0;
  int rows = 0;
  long middle = minb;
  for (long size = minb; size <= maxb / 2 && size > 0; size = factor > 1 ? size * factor : size + 1048576L) middle = size;
  for (long size = minb; size <= maxb; size = factor > 1 ? size * factor : size + 1048576L) {
    long wrong = (nwrong > 0 && size == middle) ? nwrong : 0;
    if (wrong) errors++;
    double busbw = top * (double)size / ((double)size + 4.0 * 1048576.0);
    double algbw = busbw * ngpus / (2.0 * (ngpus - 1 > 0 ? ngpus - 1 : 1));
    double us = algbw > 0 ? size / (algbw * 1e3) : 0;
    printf("%12ld  %12ld  %8s  %6s  %6s  %7.2f  %6.2f  %6.2f  %6ld  %7.2f  %6.2f  %6.2f  %6d\n", size, size / 4, "float",
           "sum", "-1", us, algbw, busbw, wrong, us, algbw, busbw, 0);
    if (out)
      fprintf(out, "%s{\"size\":%ld,\"count\":%ld,\"type\":\"float\",\"redop\":\"sum\",\"root\":\"    -1\","
              "\"out_of_place\":{\"time\":%lf,\"alg_bw\":%lf,\"bus_bw\":%lf,\"nwrong\":%lf},"
              "\"in_place\":{\"time\":%lf,\"alg_bw\":%lf,\"bus_bw\":%lf,\"nwrong\":%lf},"
              "\"actual_iterations\":%d,\"experiment_name\":\"\"}", rows ? "," : "", size, size / 4, us,
              algbw, busbw, (double)wrong, us, algbw, busbw, 0.0, iters);
    sum += busbw;
    rows++;
    if (size <= 0) break;
  }
  stamp(end, sizeof(end));
  printf("# Out of bounds values : %d %s\n# Avg bus bandwidth    : %g \n#\n# Collective test concluded: all_reduce_perf\n#\n\n",
         errors, errors ? "FAILED" : "OK", rows ? sum / rows : 0.0);
  if (out) {
    fprintf(out, "],\"out_of_bounds\":{\"count\":%d,\"okay\":\"%s\"},\"average_bus_bandwidth\":{\"bandwidth\":%lf,"
            "\"okay\":\"unchecked\"},\"errors\":[\"\"],\"end_time\":\"%s\"}", errors, errors ? "false" : "true",
            rows ? sum / rows : 0.0, end);
    fclose(out);
  }
  if (errors) {
    printf(" .. %s pid %d: Test failure common.cu:1454\n", host, (int)getpid());
    return 7;
  }
  return 0;
}
