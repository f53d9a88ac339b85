// Chapter 6 exercise: the ring of stages of a warp-specialized kernel, as index arithmetic. The
// checker feeds the answers to a model of a producer, a consumer and their mbarriers.
#include <stdint.h>
#include <stdio.h>  // printf, for debugging: what the code prints comes after the verdict

// [show]
// A ring of `stages` shared-memory stages carries K steps t = 0, 1, 2, ... from a producer to the
// consumers. Stage i has two mbarriers, full[i] (the producer has filled it) and empty[i] (the
// consumers are done with it); each completes one phase every time the stage is used. A wait
// mbarrier.try_wait.parity(bar, p) returns once the phase of parity p has completed; a fresh
// barrier counts as having completed a phase of parity 1 (so a wait for parity 1 returns at once).
// For K step t, set *stage (the stage it uses), *full_parity (what the consumers wait for on
// full[stage] before reading) and *empty_parity (what the producer waits for on empty[stage]
// before it fills the stage; it waits before every fill, the first round included).
static void ring_slot(int t, int stages, int* stage, int* full_parity, int* empty_parity) {
    // @BODY@
}
// [/show]

extern "C" int qgex_run(const void* const* in, void* const* out, const int64_t* dims, char* err, int err_len) {
    (void)in;
    (void)err;
    (void)err_len;
    int32_t* slot = (int32_t*)out[0];  // [steps, 3]: stage, full parity, empty parity
    const int stages = (int)dims[0], steps = (int)dims[1];
    for (int t = 0; t < steps; t++) {
        int s = -1, f = -1, e = -1;
        ring_slot(t, stages, &s, &f, &e);
        slot[3 * t] = s;
        slot[3 * t + 1] = f;
        slot[3 * t + 2] = e;
    }
    return 0;
}
