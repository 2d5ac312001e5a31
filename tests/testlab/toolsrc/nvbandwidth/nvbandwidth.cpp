// gpulab test lab stand-in for NVIDIA's nvbandwidth (no GPU): its options (Boost program_options, as
// the real tool parses them), its plain output and its -j JSON in the real forms, for the GPUs
// /etc/gpulab-testlab/fake-gpus.json ($GPULAB_FAKE_GPUS) lists; without that file it fails as the
// real tool does on a host without a GPU. Figures: 25 GB/s host<->GPU, 200 GB/s GPU<->GPU.
// Faults planted per GPU in that file (tests/samples/nvbandwidth/SOURCE.md has the real forms):
//   "peer_access": false     no peer access: the GPU's row and column of a GPU-to-GPU matrix are "N/A"
//                            (the testcase is "Waived" when no pair of GPUs has peer access)
//   "corrupts_in": "<case>"  the data check after a copy of that testcase fails: the compare kernel's
//                            two lines before the document, the testcase left "Running", the document's
//                            error the ASSERT of h_errorFlag, exit 1 (later testcases do not run)
#include <boost/program_options.hpp>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>
#include "version.h"

namespace po = boost::program_options;

struct Gpu { bool peer = true; std::string corruptsIn; };

// The GPUs of the file: each top-level {...} of its list that has a "name"; the two fault keys read by hand
// (the stand-in has no JSON library).
static std::vector<Gpu> fakeGpus() {
    const char *env = std::getenv("GPULAB_FAKE_GPUS");
    std::ifstream f(env ? env : "/etc/gpulab-testlab/fake-gpus.json");
    std::stringstream text;
    text << f.rdbuf();
    std::string s = text.str();
    std::vector<Gpu> gpus;
    int depth = 0;
    size_t start = 0;
    for (size_t i = 0; i < s.size(); i++) {
        if (s[i] == '{' && depth++ == 0) start = i;
        if (s[i] != '}' || --depth != 0) continue;
        std::string obj = s.substr(start, i - start + 1);
        if (obj.find("\"name\"") == std::string::npos) continue;
        Gpu g;
        size_t k = obj.find("\"peer_access\"");
        if (k != std::string::npos) {
            size_t f = obj.find("false", k);
            g.peer = !(f != std::string::npos && f < obj.find_first_of(",}", k));
        }
        k = obj.find("\"corrupts_in\"");
        if (k != std::string::npos) {
            size_t a = obj.find('"', obj.find(':', k) + 1), b = obj.find('"', a + 1);
            if (a != std::string::npos && b != std::string::npos) g.corruptsIn = obj.substr(a + 1, b - a - 1);
        }
        gpus.push_back(g);
    }
    return gpus;
}

struct Case { std::string name, description; int rows, cols; double value; bool peers; };

// memcpy.cpp memcmpPatternHelper's ASSERT as error_handling.h words it (the real build's path)
static const char *CORRUPTION =
    "ASSERT in expression h_errorFlag == 0 in void memcmpPatternHelper(CUstream, CUdeviceptr, long long unsigned int, "
    "unsigned int, CompareKernelFunc, std::shared_ptr<NodeHelper>)() : /opt/gpulab/build/nvbandwidth-0.8/memcpy.cpp:165";

int main(int argc, char **argv) {
    po::options_description opts("nvbandwidth CLI");
    std::vector<std::string> testcases;
    opts.add_options()
        ("help,h", "Produce help message")
        ("bufferSize,b", po::value<unsigned>()->default_value(512), "Memcpy buffer size in MiB")
        ("list,l", "List available testcases")
        ("testcase,t", po::value<std::vector<std::string>>(&testcases)->multitoken(), "Testcase(s) to run (by name or index)")
        ("verbose,v", "Verbose output")
        ("json,j", "Print output in json format instead of plain text.");
    po::variables_map vm;
    try {
        po::store(po::parse_command_line(argc, argv, opts), vm);
        po::notify(vm);
    } catch (const std::exception &e) {
        std::cerr << "ERROR: " << e.what() << std::endl;
        return 1;
    }
    if (vm.count("help")) { std::cout << opts << std::endl; return 0; }
    bool json = vm.count("json") > 0;
    std::vector<Gpu> gpus = fakeGpus();
    int n = static_cast<int>(gpus.size());
    if (n == 0) {
        if (json) std::cout << "{\"nvbandwidth\": {\"error\": \"cuInit(0) failed: no CUDA-capable device is detected\", "
                               "\"version\": \"" NVBANDWIDTH_VERSION "\"}}" << std::endl;
        else std::cout << "nvbandwidth Version: " NVBANDWIDTH_VERSION "\nBuilt from Git version: " GIT_VERSION "\n\n"
                          "[CUDA_ERROR_NO_DEVICE] no CUDA-capable device is detected in function cuInit(0)" << std::endl;
        return 1;
    }
    int withPeers = 0;
    for (const Gpu &g : gpus) withPeers += g.peer;
    std::vector<Case> all = {
        {"host_to_device_memcpy_ce", "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)", 1, n, 25.0, false},
        {"device_to_host_memcpy_ce", "memcpy CE CPU(row) <- GPU(column) bandwidth (GB/s)", 1, n, 25.0, false},
        {"device_to_device_memcpy_read_ce", "memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)", n, n, 200.0, true}};
    std::vector<Case> run;
    for (const Case &c : all)
        for (const std::string &t : testcases.empty() ? std::vector<std::string>{c.name} : testcases)
            if (t == c.name) run.push_back(c);
    std::ostringstream out, cases;
    bool corrupted = false;
    if (!json) out << "nvbandwidth Version: " NVBANDWIDTH_VERSION "\nBuilt from Git version: " GIT_VERSION "\n\n";
    for (size_t i = 0; i < run.size() && !corrupted; i++) {
        const Case &c = run[i];
        bool waived = c.peers && withPeers < 2;  // no pair of GPUs with peer access (one GPU included)
        for (const Gpu &g : gpus) corrupted = corrupted || (!waived && g.corruptsIn == c.name);
        if (corrupted)  // the compare kernel's printf, before anything else the tool prints
            std::cout << " Invalid value when checking the pattern at 0x7f3a5c000000\n Current offset : 1048576 " << std::endl;
        // a pair's figure, or "N/A": a GPU to itself, or a GPU without peer access
        auto value = [&](int r, int k) {
            return c.peers && (r == k || !gpus[r].peer || !gpus[k].peer) ? std::string("N/A")
                                                                         : std::to_string(c.value).substr(0, 6);
        };
        double sum = 0;
        for (int r = 0; r < c.rows; r++)
            for (int k = 0; k < c.cols; k++) sum += value(r, k) == "N/A" ? 0 : c.value;
        if (json) {
            cases << (i ? "," : "") << "\n            {\n                \"name\": \"" << c.name << "\",\n                \"status\": \""
                  << (waived ? "Waived" : corrupted ? "Running" : "Passed") << "\"";
            if (!waived && !corrupted) {
                cases << ",\n                \"bandwidth_description\": \"" << c.description << "\",\n                \"bandwidth_matrix\": [";
                for (int r = 0; r < c.rows; r++) {
                    cases << (r ? "," : "") << "\n                    [";
                    for (int k = 0; k < c.cols; k++) cases << (k ? ", " : "") << "\"" << value(r, k) << "\"";
                    cases << "]";
                }
                cases << "\n                ],\n                \"sum\": " << sum;
            }
            cases << "\n            }";
        } else {
            out << "Running " << c.name << ".\n";
            if (waived) { out << "Waived: Only one device found, skipping.\n\n"; continue; }
            if (corrupted) break;
            out << c.description << "\n     ";
            for (int k = 0; k < c.cols; k++) out << "     " << k;
            out << "\n";
            for (int r = 0; r < c.rows; r++) {
                out << " " << r << "  ";
                for (int k = 0; k < c.cols; k++) { std::string v = value(r, k); out << "  " << std::string(6 - v.size(), ' ') << v; }
                out << "\n";
            }
            out << "\nSUM " << c.name << " " << sum << "\n\n";
        }
    }
    if (json) {  // jsoncpp writes the keys in sorted order
        out << "{\n    \"nvbandwidth\": {\n        \"CUDA Runtime Version\": 13000,\n        \"Driver Version\": \"580.159.04\",\n";
        if (corrupted) out << "        \"error\": \"" << CORRUPTION << "\\n\",\n";
        out << "        \"git_version\": \"" GIT_VERSION "\",\n        \"testcases\": [" << cases.str()
            << "\n        ],\n        \"version\": \"" NVBANDWIDTH_VERSION "\"\n    }\n}";
    }
    std::cout << out.str() << std::endl;
    if (corrupted && !json) std::cerr << CORRUPTION << std::endl;
    return corrupted ? 1 : 0;
}
