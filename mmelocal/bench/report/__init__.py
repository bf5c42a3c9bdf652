"""Reports: an HTML page with PNG plots, CSV and JSON (:mod:`~mmelocal.bench.report.page`);
the plots themselves (:mod:`~mmelocal.bench.report.plots`, matplotlib imported on use).

The names of :mod:`~mmelocal.bench.report.page` are importable from here.
"""

from mmelocal.bench.report.page import *  # noqa: F403
from mmelocal.bench.report.page import __all__ as __all__
