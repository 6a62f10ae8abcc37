/* SPDX-License-Identifier: BSD-3-Clause */
/* sampler_dump.c: reads case lines "N W B shuffle drop_last seed epoch
 * consumed" on stdin and prints every rank's batches for that pass in the
 * format of tests/sampler_ref.py expect, for tests/sampler-ref.sh to diff. */
#include "ddpc_sampler.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

int main(void)
{
    unsigned long long n, batch, seed, epoch, consumed;
    int world, shuffle, drop_last;
    while (scanf("%llu %d %llu %d %d %llu %llu %llu", &n, &world, &batch, &shuffle, &drop_last,
                 &seed, &epoch, &consumed) == 8) {
        printf("case %llu %d %llu %d %d %llu %llu %llu\n", n, world, batch, shuffle, drop_last,
               seed, epoch, consumed);
        ddpc_sampler_config_t cfg = {seed, shuffle, drop_last};
        ddpc_sampler_state_t st = {seed, epoch, consumed, n, shuffle, drop_last};
        size_t *idx = malloc(batch * sizeof *idx);
        for (int r = 0; r < world; r++) {
            ddpc_sampler_t s;
            if (ddpc_sampler_create(n, r, world, batch, &cfg, &s) != DDPC_OK ||
                ddpc_sampler_resume(s, &st) != DDPC_OK) {
                fprintf(stderr, "%s\n", ddpc_sampler_last_error(s));
                return 1;
            }
            printf("rank %d ns %zu nb %zu", r, ddpc_sampler_num_samples(s),
                   ddpc_sampler_num_batches(s));
            size_t k = 0, got;
            while (ddpc_sampler_next_batch(s, idx, &got) == DDPC_OK && got) {
                if (k++ == 0) {
                    ddpc_sampler_state_t after;
                    ddpc_sampler_get_state(s, &after);
                    printf(" c1 %" PRIu64 " :", after.consumed);
                } else {
                    printf(" /");
                }
                for (size_t i = 0; i < got; i++)
                    printf(" %zu", idx[i]);
            }
            if (k == 0) { /* an empty pass: consumed is already the dataset size */
                ddpc_sampler_state_t after;
                ddpc_sampler_get_state(s, &after);
                printf(" c1 %" PRIu64 " :", after.consumed);
            }
            printf("\n");
            ddpc_sampler_destroy(s);
        }
        free(idx);
    }
    return 0;
}
