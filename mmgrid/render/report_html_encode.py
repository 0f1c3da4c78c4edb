"""How a value reaches report.html: one encoder per context, after OWASP's output-encoding rules.

- :func:`html_text`: a value inside an element (``<td>VALUE</td>``): ``& < > " '`` become entities.
- :func:`html_attr`: a value inside a quoted attribute (``id="VALUE"``): the same, always quoted by the caller.
- :func:`script_json`: data inside a ``<script>`` block (``<script type="application/json">`` or an inline
  script's literal): JSON with ``<``, ``>`` and ``&`` written as ``\\u003c``, ``\\u003e``, ``\\u0026`` and the
  line separators U+2028 / U+2029 as ``\\u2028`` / ``\\u2029``, so no ``</script>``, ``<!--`` or ``<script``
  inside a value can end the block or switch the HTML parser's script state; ``JSON.parse`` reads it back
  unchanged.
- :func:`plotly_div`: a plotly figure as a ``<div>`` and its JSON (through :func:`script_json`) drawn by
  ``Plotly.newPlot``; plotly's own ``to_html`` escapes only ``</``.

The page's JavaScript builds the checkpoint card from that JSON and passes every value through its own
``esc`` (the same five characters) before it becomes markup.
"""

from __future__ import annotations

import html
import json
from typing import Any

import numpy as np

_SCRIPT_SAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def html_text(value: Any) -> str:
    """``value`` as HTML text (element content)."""
    return html.escape(str(value), quote=True)


def html_attr(value: Any) -> str:
    """``value`` as the content of a double-quoted HTML attribute."""
    return html.escape(str(value), quote=True)


def script_json(data: Any, *, encoded: bool = False) -> str:
    """``data`` as JSON safe to place inside a ``<script>`` block (``encoded``: ``data`` is JSON text already).

    Non-finite floats become ``null``; numpy scalars their Python values; anything else its ``str``.
    """
    text = data if encoded else json.dumps(data, separators=(",", ":"), default=_json_default, allow_nan=False)
    for ch, rep in _SCRIPT_SAFE.items():
        text = text.replace(ch, rep)
    return text


def _json_default(v: Any) -> Any:
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v) if np.isfinite(v) else None
    return str(v)


def json_safe(data: Any) -> Any:
    """``data`` with every non-finite float replaced by None (JSON has no NaN)."""
    if isinstance(data, float):
        return data if np.isfinite(data) else None
    if isinstance(data, dict):
        return {k: json_safe(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [json_safe(v) for v in data]
    return data


def plotly_div(fig: Any, div_id: str, config: dict[str, Any] | None = None) -> str:
    """A plotly figure as ``<div>`` + its JSON block + the call that draws it (the page inlines plotly.js)."""
    import plotly.io as pio  # lazy: plotly (~0.3 s) only when report.html is written

    spec = pio.to_json({"data": fig.to_dict().get("data", []), "layout": fig.to_dict().get("layout", {}),
                        "config": config or {}}, validate=False)
    height = fig.layout.height
    style = f"height:{int(height)}px; width:100%;" if height else "height:100%; width:100%;"
    return (f'<div id="{html_attr(div_id)}" class="plotly-graph-div" style="{style}"></div>'
            f'<script type="application/json" id="{html_attr(div_id)}-spec">{script_json(spec, encoded=True)}</script>'
            "<script>(function(){const id = " + script_json(div_id) + ";"
            "const s = JSON.parse(document.getElementById(id + '-spec').textContent);"
            "Plotly.newPlot(id, s.data, s.layout, s.config);})();</script>")
