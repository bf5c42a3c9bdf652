"""Estimates: the GPU footprint of one copy and the copies per card from the model alone,
no GPU. The arithmetic and the :class:`Estimate` (:mod:`~mmelocal.bench.estimate.core`),
its parts and their sources (:mod:`~mmelocal.bench.estimate.parts`), weights and
activations traced on fake tensors (:mod:`~mmelocal.bench.estimate.activations`), a model,
folder or tarball estimated (:mod:`~mmelocal.bench.estimate.model`), the published runs
(:mod:`~mmelocal.bench.estimate.published`), the check against them
(:mod:`~mmelocal.bench.estimate.calibration`), each model held out of the fit
(:mod:`~mmelocal.bench.estimate.holdout`), and PyTorch's caching allocator replayed
(:mod:`~mmelocal.bench.estimate.allocator`).

The names of :mod:`~mmelocal.bench.estimate.core` are importable from here.
"""

from mmelocal.bench.estimate.core import *  # noqa: F403
from mmelocal.bench.estimate.core import __all__ as __all__
