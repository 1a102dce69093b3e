"""Looking at runs: the HTML report, the live job page, TensorBoard scalars.

``collect(run)`` reads a run directory into a JSON-safe snapshot; ``write_report`` renders it as
one self-contained HTML file; ``LiveServer`` serves the same page while a job runs;
``TensorBoardWriter`` turns metrics lines into TensorBoard scalars. Plots need the optional
extra ``mariana-bsp[report]`` (plotly, tensorboardX).
"""

from .data import collect
from .html import report_html, write_report

__all__ = ["collect", "report_html", "write_report"]
