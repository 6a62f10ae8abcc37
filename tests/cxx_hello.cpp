/* SPDX-License-Identifier: BSD-3-Clause */
// cxx_hello.cpp: a C++ program against the installed ddpc (tests/embed.sh
// builds it with g++ -std=c++17 -Wall -Wextra -Werror -pedantic and
// pkg-config, then runs it on 2 ranks): the headers are C++-clean, and the
// calls link and work from C++. Prints "cxx: rank R/N sum=S" (S = N(N+1)/2).
#include <ddpc.h>

#include <cstdio>
#include <vector>

int main(int argc, char **argv)
{
    ddpc_config_t cfg = DDPC_CONFIG_INIT;
    ddpc_t rt = nullptr;
    if (ddpc_init(&cfg, &argc, &argv, &rt) != DDPC_OK) {
        std::fprintf(stderr, "cxx: %s\n", rt ? ddpc_last_error(rt) : ddpc_init_error());
        ddpc_finalize(rt);
        return 1;
    }
    const ddpc_world_t *w = ddpc_world(rt);
    std::vector<double> mine(4, double(w->rank + 1)), sum(4, 0.0);
    ddpc_status_t st = ddpc_allreduce(ddpc_comm_world(rt), mine.data(), sum.data(), mine.size(),
                                      DDPC_F64, DDPC_SUM);
    if (st != DDPC_OK) {
        std::fprintf(stderr, "cxx: %s: %s\n", ddpc_strerror(st), ddpc_last_error(rt));
        ddpc_finalize(rt);
        return 1;
    }
    std::printf("cxx: rank %d/%d sum=%g\n", w->rank, w->size, sum[3]);
    return ddpc_finalize(rt) == DDPC_OK ? 0 : 1;
}
