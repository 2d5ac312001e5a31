/* gpulab test lab stand-in for nvbandwidth's version.h */
#ifndef VERSION_H_
#define VERSION_H_
#define NVBANDWIDTH_VERSION "v@VERSION@"
#ifndef GIT_VERSION
#define GIT_VERSION ""
#endif
#endif
