"""The notebooks run top to bottom (nbclient) and write their figures, so they cannot
go stale.  Each runs in a fresh kernel started in notebooks/, like Jupyter would."""

from __future__ import annotations

import pytest

from npusim.config.presets import REPO_ROOT

pytestmark = pytest.mark.component
NOTEBOOKS = REPO_ROOT / "notebooks"
FIGURES = {
    "00_quickstart": ["utilisation_timeline.png", "task_duration_cdf.png"],
    "01_npu_design_space": ["fig8_shape.png", "grid_heatmap.png", "grid_pareto.png"],
    "02_serving_pd": ["io_latency_heatmap.png", "prefill_share.png", "latency_cdf.png",
                      "pd_modes.png", "request_latency_cdf.png", "serving_batches.png",
                      "capacity.png"],
}


def test_every_notebook_is_tested():
    assert sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb")) == sorted(FIGURES)


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_notebook_runs_and_writes_its_figures(name, tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient

    monkeypatch.setenv("NPUSIM_NOTEBOOK_OUT", str(tmp_path))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    book = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    client = NotebookClient(book, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute()  # raises CellExecutionError with the failing cell and its traceback
    for figure in FIGURES[name]:
        path = tmp_path / name / figure
        assert path.is_file() and path.stat().st_size > 1000, path
    outputs = [o for cell in book.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert any(o.get("output_type") == "display_data" and "image/png" in o.get("data", {})
               for o in outputs), "no figure was displayed"
