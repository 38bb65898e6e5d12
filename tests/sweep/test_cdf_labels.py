"""CDF curves per combination of several columns (``plot_latency_cdf(by=[...])``), as
a sweep's per-request CDF draws one per point, named by the parameters that differ."""

from __future__ import annotations

import pandas as pd
import pytest

from npusim import analysis

@pytest.mark.unit
def test_cdf_curves_per_combination_of_several_columns_are_named_by_their_values():
    frame = pd.DataFrame({"workload.pd.prefill_cores": [42, 42, 21, 21, 42],
                          "hw.core.sram_bytes": [2**27, 2**27, 2**27, 2**27, 2**26],
                          "e2e_ps": [1, 2, 3, 4, 5]})
    figure = analysis.plot_latency_cdf(frame, "e2e_ps",
                                       by=["workload.pd.prefill_cores", "hw.core.sram_bytes"])
    labels = [line.get_label() for line in figure.axes[0].get_lines()]
    assert labels == ["prefill_cores=21, sram_bytes=128 MiB",
                      "prefill_cores=42, sram_bytes=64 MiB",
                      "prefill_cores=42, sram_bytes=128 MiB"]
    # two paths that end alike keep their whole names
    frame["workload.x.cores"] = frame["hw.y.cores"] = [1, 1, 1, 1, 2]
    figure = analysis.plot_latency_cdf(frame, "e2e_ps", by=["workload.x.cores", "hw.y.cores"])
    assert figure.axes[0].get_lines()[0].get_label() == "workload.x.cores=1, hw.y.cores=1"
    with pytest.raises(analysis.AnalysisError, match="by: expected a column name or a "
                                                     "non-empty list"):
        analysis.plot_latency_cdf(frame, "e2e_ps", by=[])
    with pytest.raises(analysis.AnalysisError, match="nope"):
        analysis.plot_latency_cdf(frame, "e2e_ps", by=["workload.x.cores", "nope"])
