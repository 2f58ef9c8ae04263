"""Helpers for distributed training on ``torch.distributed``, launched by torchrun or mpirun.

:func:`initialize_ompi_environment` initializes the process group from the variables that
OpenMPI's ``mpirun`` sets; :class:`DistributedValidationSampler` shares a validation set
between the ranks with each sample exactly once; :func:`create_distributed_subset_indices`
gives each rank an equal-sized share of a training set. The data parallel model is
:class:`pytorch_pfn_extras.nn.parallel.DistributedDataParallel` (ppe-core).
"""

from __future__ import annotations

from pytorch_pfn_extras.distributed._initialize import initialize_ompi_environment
from pytorch_pfn_extras.distributed._sampler import DistributedValidationSampler
from pytorch_pfn_extras.distributed._subset import create_distributed_subset_indices

__all__ = [
    "DistributedValidationSampler",
    "create_distributed_subset_indices",
    "initialize_ompi_environment",
]
