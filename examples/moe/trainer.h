// The training loop: the model of this rank's pipeline stage, its parameters as data
// parallelism holds them, the optimizer over what the rank owns, and the probe's calls at every
// step's edges. The parallel dimensions live in pipeline.h and data_parallel.h, the faults in
// faults.h.
#pragma once

#include "config.h"
#include "faults.h"
#include "parallel.h"

namespace probe {
class Probe;
}

namespace moe {

// Trains config.steps steps, printing each step's loss and times on rank 0, then writes the
// parameters' fingerprints if --params-out asks for them.
void train(const Config& config, ProcessGroups& groups, probe::Probe& probe, const Fault& fault);

}  // namespace moe
