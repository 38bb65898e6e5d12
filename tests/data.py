"""Where tests find data that is not in the repository: the Azure LLM inference 2023
traces (docs/traces.md says where to download them).

``NPUSIM_DATA_DIR`` names the folder holding them; by default it is ``shared/data``
beside the checkout (``<checkout>/../shared/data``), where the development machines keep
them.  Tests that need a trace skip, saying which path they looked at, when it is absent.
"""
from __future__ import annotations

import os
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]
DATA_DIR = Path(os.environ.get("NPUSIM_DATA_DIR") or CHECKOUT.parent / "shared" / "data")
AZURE_CONV = DATA_DIR / "AzureLLMInferenceTrace_conv.csv"
AZURE_CODE = DATA_DIR / "AzureLLMInferenceTrace_code.csv"


def missing(path: Path) -> str:
    """The skip reason for a test whose trace file is absent."""
    return (f"{path} not found (download it from github.com/Azure/AzurePublicDataset, "
            "or set NPUSIM_DATA_DIR to the folder holding it)")
