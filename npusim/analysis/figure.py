"""The Figure every plot helper returns: matplotlib's, on an Agg canvas (no pyplot
state, no display needed), shown as an image when it is a Jupyter cell's value.

Imported on first plot, so ``import npusim.analysis`` does not load matplotlib.
"""

from __future__ import annotations

import io

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


class ShownFigure(Figure):
    """A :class:`~matplotlib.figure.Figure` with ``_repr_png_``.

    IPython shows an object through ``_repr_png_`` unless a formatter is registered for
    its type; matplotlib-inline (``%matplotlib inline``, or a pyplot import in some
    kernels) registers one for Figure, which then wins.  Either way a cell shows one
    image; a bare Agg Figure showed only ``<Figure size 600x400 with 1 Axes>``.
    """

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.savefig(buffer, format="png", dpi=100)
        return buffer.getvalue()


def new_figure(figsize: tuple[float, float]) -> ShownFigure:
    """An empty :class:`ShownFigure` of ``figsize`` inches on an Agg canvas, with
    constrained layout."""
    figure = ShownFigure(figsize=figsize, layout="constrained")
    FigureCanvasAgg(figure)
    return figure
