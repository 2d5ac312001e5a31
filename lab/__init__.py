"""gpulab's controller: inventory, provisioning, sweeps, results, reports, validation."""
