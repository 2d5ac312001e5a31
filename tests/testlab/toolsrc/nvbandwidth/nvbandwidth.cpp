// gpulab test lab stand-in for NVIDIA's nvbandwidth (no GPU): its options (Boost program_options, as
// the real tool parses them), its plain output and its -j JSON in the real forms, for the GPUs
// /etc/gpulab-testlab/fake-gpus.json ($GPULAB_FAKE_GPUS) lists; without that file it fails as the
// real tool does on a host without a GPU. Figures: 25 GB/s host<->GPU, 200 GB/s GPU<->GPU.
#include <boost/program_options.hpp>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>
#include "version.h"

namespace po = boost::program_options;

static int fakeGpus() {
    const char *env = std::getenv("GPULAB_FAKE_GPUS");
    std::ifstream f(env ? env : "/etc/gpulab-testlab/fake-gpus.json");
    std::stringstream text;
    text << f.rdbuf();
    std::string s = text.str();
    int n = 0;
    for (size_t p = s.find("\"name\""); p != std::string::npos; p = s.find("\"name\"", p + 1)) n++;
    return n;
}

struct Case { std::string name, description; int rows, cols; double value; bool diagonalZero; };

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
    int n = fakeGpus();
    if (n == 0) {
        if (json) std::cout << "{\"nvbandwidth\": {\"error\": \"cuInit(0) failed: no CUDA-capable device is detected\", "
                               "\"version\": \"" NVBANDWIDTH_VERSION "\"}}" << std::endl;
        else std::cout << "nvbandwidth Version: " NVBANDWIDTH_VERSION "\nBuilt from Git version: " GIT_VERSION "\n\n"
                          "[CUDA_ERROR_NO_DEVICE] no CUDA-capable device is detected in function cuInit(0)" << std::endl;
        return 1;
    }
    std::vector<Case> all = {
        {"host_to_device_memcpy_ce", "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)", 1, n, 25.0, false},
        {"device_to_host_memcpy_ce", "memcpy CE CPU(row) <- GPU(column) bandwidth (GB/s)", 1, n, 25.0, false},
        {"device_to_device_memcpy_read_ce", "memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)", n, n, 200.0, true}};
    std::vector<Case> run;
    for (const Case &c : all)
        for (const std::string &t : testcases.empty() ? std::vector<std::string>{c.name} : testcases)
            if (t == c.name) run.push_back(c);
    std::ostringstream out;
    if (json) out << "{\n    \"nvbandwidth\": {\n        \"CUDA Runtime Version\": 13000,\n        \"Driver Version\": \"580.159.04\",\n"
                     "        \"git_version\": \"" GIT_VERSION "\",\n        \"version\": \"" NVBANDWIDTH_VERSION "\",\n        \"testcases\": [";
    else out << "nvbandwidth Version: " NVBANDWIDTH_VERSION "\nBuilt from Git version: " GIT_VERSION "\n\n";
    for (size_t i = 0; i < run.size(); i++) {
        const Case &c = run[i];
        bool waived = c.rows > 1 && n < 2;
        if (json) {
            out << (i ? "," : "") << "\n            {\n                \"name\": \"" << c.name << "\",\n                \"status\": \""
                << (waived ? "Waived" : "Passed") << "\"";
            if (!waived) {
                out << ",\n                \"bandwidth_description\": \"" << c.description << "\",\n                \"bandwidth_matrix\": [";
                for (int r = 0; r < c.rows; r++) {
                    out << (r ? "," : "") << "\n                    [";
                    for (int k = 0; k < c.cols; k++)
                        out << (k ? ", " : "") << "\"" << (c.diagonalZero && r == k ? "N/A" : std::to_string(c.value).substr(0, 6)) << "\"";
                    out << "]";
                }
                out << "\n                ],\n                \"sum\": " << c.value * c.cols * (c.diagonalZero ? c.rows - 1 : c.rows);
            }
            out << "\n            }";
        } else {
            out << "Running " << c.name << ".\n";
            if (waived) { out << "Waived: Only one device found, skipping.\n\n"; continue; }
            out << c.description << "\n     ";
            for (int k = 0; k < c.cols; k++) out << "     " << k;
            out << "\n";
            for (int r = 0; r < c.rows; r++) {
                out << " " << r << "  ";
                for (int k = 0; k < c.cols; k++) out << "  " << (c.diagonalZero && r == k ? "   N/A" : std::to_string(c.value).substr(0, 6));
                out << "\n";
            }
            out << "\nSUM " << c.name << " " << c.value * c.cols * (c.diagonalZero ? c.rows - 1 : c.rows) << "\n\n";
        }
    }
    if (json) out << "\n        ]\n    }\n}";
    std::cout << out.str() << std::endl;
    return 0;
}
