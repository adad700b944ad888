"""Loggers of statistics written in Python, with nvdlfw_inspect.logging's names: a
``statistics_logger`` or ``tb_writer`` given to ``dlinspect.initialize()``, or a logger added
with ``MetricLogger.add_logger()`` (before or after it), receives every scalar the config's
loggers receive (the file log's and TensorBoard's), as ``log_scalar(name, value, iteration)``.

The core queues the scalars without the GIL and the extension hands them over at the end of
``dlinspect.step()`` (in the order they were logged, a step's statistics right after that step),
at ``end_debug()``, and at once for ``MetricLogger.log_scalar()``. See docs/python.md, "Python
loggers".
"""

import abc

from . import _dlinspect as _c

__all__ = ["BaseLogger", "MetricLogger", "TensorboardLogger", "wrap_tensorboard_writer"]


class BaseLogger(abc.ABC):
    """What a statistics logger implements (any object with a callable log_scalar is taken)."""

    @abc.abstractmethod
    def log_scalar(self, name, value, iteration, **kwargs):
        """One statistic: name as the file log writes it, value a float, iteration an int."""


class TensorboardLogger(BaseLogger):
    """A torch.utils.tensorboard SummaryWriter (or any object with add_scalar) as a logger."""

    def __init__(self, tb_writer):
        if not callable(getattr(tb_writer, "add_scalar", None)):
            raise TypeError(f"tb_writer must have an add_scalar(tag, value, step) method (a "
                            f"SummaryWriter); {type(tb_writer).__name__} has none")
        self.tb_writer = tb_writer

    def log_scalar(self, name, value, iteration, **kwargs):
        self.tb_writer.add_scalar(name, value, iteration)


def wrap_tensorboard_writer(tb_writer):
    """A SummaryWriter as a logger for MetricLogger.add_logger()."""
    return TensorboardLogger(tb_writer)


def _check(logger):
    if not callable(getattr(logger, "log_scalar", None)):
        raise TypeError(f"a statistics logger must have a log_scalar(name, value, iteration) "
                        f"method (subclass dlinspect.logging.BaseLogger); "
                        f"{type(logger).__name__} has none")
    return logger


class MetricLogger:
    """The Python loggers that receive the statistics. end_debug() empties the list, as
    nvdlfw_inspect's does."""

    enabled_loggers = []

    @staticmethod
    def add_logger(logger):
        MetricLogger.enabled_loggers.append(_check(logger))

    @staticmethod
    def log_scalar(name, value, iteration, **kwargs):
        """A scalar of the caller's own, to every logger: the config's (file log, TensorBoard)
        while dlinspect is initialized, and the Python ones. value: anything float() takes (a
        0-d tensor too)."""
        _c._log_scalar(str(name), float(value), iteration)


def _deliver(items):
    """The extension's sink: every queued (name, value, iteration) to every Python logger. A
    logger that raises does not keep the others from their scalars; the first error is raised
    after all were handed over."""
    first = None
    loggers = list(MetricLogger.enabled_loggers)
    for name, value, iteration in items:
        for lg in loggers:
            try:
                lg.log_scalar(name, value, iteration)
            except Exception as e:  # noqa: BLE001 (raised below)
                if first is None:
                    first = e
    if first is not None:
        raise first


_c._scalars_sink(_deliver)
