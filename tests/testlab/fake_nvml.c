/* Stand-in for NVIDIA's libnvidia-ml.so.1 (gpulab test lab; not NVIDIA software).
 *
 * The NVML C API as nvml.h declares it, for the calls the runner's probe and health check make
 * through nvidia-ml-py; every other call is absent, so nvidia-ml-py reports it "Function Not
 * Found", as an old driver does. The GPUs are those of /etc/gpulab-testlab/fake-gpus.json (or
 * $GPULAB_FAKE_GPUS), the file the stand-in nvidia-smi reads: a JSON list of flat objects with
 * "name", optional "uuid", "serial", and the row remapper's "remap_correctable",
 * "remap_uncorrectable", "remap_pending", "remap_failure" (numbers, or true/false), and
 * "ecc_uncorrected" (volatile and aggregate). Without the file nvmlInit answers
 * NVML_ERROR_DRIVER_NOT_LOADED, as on a machine whose driver is not loaded.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXGPU 16
#define OBJ 4096

typedef struct nvmlDevice_st *nvmlDevice_t;
static char gpus[MAXGPU][OBJ];
static int count = -1;

static void load(void) {
    const char *path = getenv("GPULAB_FAKE_GPUS");
    FILE *f = fopen(path && *path ? path : "/etc/gpulab-testlab/fake-gpus.json", "r");
    count = -1;
    if (!f) return;
    static char text[MAXGPU * OBJ];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    count = 0;
    for (char *p = strchr(text, '{'); p && count < MAXGPU; p = strchr(p, '{')) {
        char *end = strchr(p, '}');
        if (!end || end - p >= OBJ) break;
        memcpy(gpus[count], p, end - p);
        gpus[count][end - p] = 0;
        count++;
        p = end;
    }
}

/* the value text after "key": in GPU i's object, or NULL */
static const char *field(unsigned i, const char *key) {
    char pat[96];
    snprintf(pat, sizeof pat, "\"%s\"", key);
    const char *p = strstr(gpus[i], pat);
    if (!p) return NULL;
    p += strlen(pat);
    while (*p == ' ' || *p == ':') p++;
    return p;
}

static unsigned number(unsigned i, const char *key) {
    const char *v = field(i, key);
    if (!v) return 0;
    if (!strncmp(v, "true", 4)) return 1;
    return (unsigned)strtoul(v, NULL, 10);
}

static int text(unsigned i, const char *key, const char *dflt, char *out, unsigned len) {
    const char *v = field(i, key);
    char buf[256];
    if (v && *v == '"') {
        const char *e = strchr(v + 1, '"');
        size_t n = e ? (size_t)(e - v - 1) : 0;
        if (n >= sizeof buf) n = sizeof buf - 1;
        memcpy(buf, v + 1, n);
        buf[n] = 0;
    } else {
        snprintf(buf, sizeof buf, "%s", dflt);
    }
    if (strlen(buf) + 1 > len) return 7; /* NVML_ERROR_INSUFFICIENT_SIZE */
    strcpy(out, buf);
    return 0;
}

#define GPU(h) ((unsigned)((uintptr_t)(h) - 1))
#define CHECK(h) do { if (count < 0) return 9; if (GPU(h) >= (unsigned)count) return 2; } while (0)

int nvmlInitWithFlags(unsigned flags) { (void)flags; load(); return count < 0 ? 9 : 0; }
int nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
int nvmlShutdown(void) { return 0; }

const char *nvmlErrorString(int r) {
    switch (r) {
    case 0: return "Success";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 7: return "Insufficient Size";
    case 9: return "Driver Not Loaded";
    case 13: return "Function Not Found";
    default: return "Unknown Error";
    }
}

int nvmlSystemGetDriverVersion(char *out, unsigned len) {
    if (count < 0) return 9;
    if (len < 16) return 7;
    strcpy(out, "580.159.04");
    return 0;
}

int nvmlDeviceGetCount_v2(unsigned *n) { if (count < 0) return 9; *n = (unsigned)count; return 0; }

int nvmlDeviceGetHandleByIndex_v2(unsigned i, nvmlDevice_t *h) {
    if (count < 0) return 9;
    if (i >= (unsigned)count) return 2;
    *h = (nvmlDevice_t)(uintptr_t)(i + 1);
    return 0;
}

int nvmlDeviceGetName(nvmlDevice_t h, char *out, unsigned len) {
    CHECK(h);
    return text(GPU(h), "name", "Tesla T4", out, len);
}

int nvmlDeviceGetUUID(nvmlDevice_t h, char *out, unsigned len) {
    char dflt[64];
    CHECK(h);
    /* the stand-in nvidia-smi's default UUID of this index */
    snprintf(dflt, sizeof dflt, "GPU-%08x-0000-0000-0000-%012x", 0x5eed0000u + GPU(h), GPU(h));
    return text(GPU(h), "uuid", dflt, out, len);
}

int nvmlDeviceGetSerial(nvmlDevice_t h, char *out, unsigned len) {
    char dflt[32];
    CHECK(h);
    snprintf(dflt, sizeof dflt, "1320%09u", GPU(h));
    return text(GPU(h), "serial", dflt, out, len);
}

int nvmlDeviceGetRemappedRows(nvmlDevice_t h, unsigned *corr, unsigned *unc, unsigned *pending, unsigned *failure) {
    CHECK(h);
    *corr = number(GPU(h), "remap_correctable");
    *unc = number(GPU(h), "remap_uncorrectable");
    *pending = number(GPU(h), "remap_pending");
    *failure = number(GPU(h), "remap_failure");
    return 0;
}

int nvmlDeviceGetTotalEccErrors(nvmlDevice_t h, int type, int counter, unsigned long long *n) {
    (void)counter;
    CHECK(h);
    *n = type == 1 ? number(GPU(h), "ecc_uncorrected") : 0; /* NVML_MEMORY_ERROR_TYPE_UNCORRECTED */
    return 0;
}
