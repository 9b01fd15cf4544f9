"""examples/notebook.ipynb runs top to bottom in a real Jupyter kernel.

Every cell of a kernel runs inside its running asyncio loop; the notebook's
blocking ``session.send()`` cells prove the sync API works there, next to
``await AsyncSession(...).send()`` cells.
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOK = pathlib.Path(__file__).parent.parent / "examples" / "notebook.ipynb"


def text_of(cell: Any) -> str:
    return "".join(
        out.get("text", "") or out.get("data", {}).get("text/plain", "") for out in cell.outputs
    )


def test_notebook_runs_in_a_real_kernel() -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    # "python3" is the kernel of the interpreter running the tests (ipykernel is installed
    # in it), so no kernelspec has to be registered anywhere
    client = nbclient.NotebookClient(
        notebook,
        kernel_name="python3",
        timeout=60,
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    client.execute()
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    errors = [out for cell in code for out in cell.outputs if out.output_type == "error"]
    assert not errors
    outputs = [text_of(cell) for cell in code]
    assert "running=True" in outputs[0]  # cells run inside the kernel's event loop
    assert "Ali" in outputs[1]  # sync send inside the running loop
    assert "Ali" in outputs[2]  # awaited send
    assert len(code[3].outputs) >= 4  # deltas printed as they arrived
    assert outputs[3].strip() == outputs[4].splitlines()[0].strip() == "Your name is Ali."
    assert "finish: stop" in outputs[4]
    assert outputs[5].startswith("8 messages:")
