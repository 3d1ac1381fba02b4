"""Line charts as inline SVG, rendered on the server from the sampler's rings (`sampler`):
throughput on the overview and topic pages, lag over time on the group page.

No chart library and no script builds them: a page embeds the SVG, and a few lines of script
(`REFRESH_SCRIPT`) fetch it again from `/chart` every sampling interval. Every name in a
chart (topics, groups) goes through `markupsafe.escape`, like everything Jinja renders.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from urllib.parse import quote

import jinja2
from aiohttp import web
from markupsafe import Markup, escape

from odradek.console.sampler import Point, Sampler

#: Series drawn at most in one chart (the largest ones); the legend counts the rest.
MAX_SERIES = 8
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
           "#17becf")
WIDTH, HEIGHT = 760, 250
LEFT, RIGHT, TOP, BOTTOM = 64, 190, 30, 42  # margins: axis labels left, legend right
#: The pages re-fetch their charts at the sampling interval, but not more often than this.
MIN_REFRESH_MS = 1000


def _nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 times a power of ten that is at least `value`."""
    if value <= 0:
        return 1.0
    base = 10.0 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if step * base >= value:
            return step * base
    return 10 * base


def _number(value: float) -> str:
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            return f"{value / limit:.3g}{suffix}"
    return f"{value:.0f}" if value == int(value) else f"{value:.3g}"


def _clock(time_ms: int) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(time_ms / 1000))


def line_chart(chart_id: str, title: str, y_label: str,
               series: Mapping[str, Sequence[Point]], *, empty_text: str) -> Markup:
    """An SVG line chart of `series` (name -> points), time on x, labelled axes and a legend.
    Each drawn series is a `polyline.series` with `data-series` (its name), `data-last` and
    `data-max` (its last and largest values)."""
    drawn = {name: points for name, points in series.items() if points}
    parts = [(f'<svg id="{escape(chart_id)}" class="chart" xmlns="http://www.w3.org/2000/svg" '
              f'width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
              f'aria-label="{escape(title)}" font-size="11" font-family="sans-serif">'),
             f'<title>{escape(title)}</title>',
             f'<text x="{LEFT}" y="16" font-size="13" font-weight="600">{escape(title)}</text>']
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    x0, y0 = LEFT, TOP + plot_h  # the origin, bottom left
    if not drawn:
        parts.append(f'<rect x="{x0}" y="{TOP}" width="{plot_w}" height="{plot_h}" '
                     f'fill="#f8f8f8" stroke="#ccc"/>'
                     f'<text class="empty" x="{x0 + plot_w / 2}" y="{TOP + plot_h / 2}" '
                     f'text-anchor="middle" fill="#666">{escape(empty_text)}</text></svg>')
        return Markup("".join(parts))
    largest = sorted(drawn, key=lambda name: (-max(v for _, v in drawn[name]), name))
    shown = sorted(largest[:MAX_SERIES])
    hidden = len(largest) - len(shown)
    t_end = max(points[-1][0] for points in drawn.values())
    t_start = min(drawn[name][0][0] for name in shown)
    t_start = min(t_start, t_end - 1000)  # one point: a second-wide axis ending at it
    y_max = _nice_ceiling(max(v for name in shown for _, v in drawn[name]))

    def x(t: int) -> float:
        return x0 + (t - t_start) * plot_w / (t_end - t_start)

    def y(v: float) -> float:
        return y0 - v * plot_h / y_max

    for i in range(5):  # y grid and labels: 0, 1/4 ... of the nice maximum
        value = y_max * i / 4
        parts.append(f'<line x1="{x0}" x2="{x0 + plot_w}" y1="{y(value):.1f}" '
                     f'y2="{y(value):.1f}" stroke="#e4e4e4"/>'
                     f'<text class="y-tick" x="{x0 - 6}" y="{y(value) + 4:.1f}" '
                     f'text-anchor="end">{_number(value)}</text>')
    for i in range(4):  # x labels: four times, the last at the newest sample
        t = t_start + (t_end - t_start) * i // 3
        parts.append(f'<text class="x-tick" x="{x(t):.1f}" y="{y0 + 15}" '
                     f'text-anchor="middle">{_clock(t)}</text>')
    parts.append(f'<line x1="{x0}" y1="{TOP}" x2="{x0}" y2="{y0}" stroke="#444"/>'
                 f'<line x1="{x0}" y1="{y0}" x2="{x0 + plot_w}" y2="{y0}" stroke="#444"/>'
                 f'<text class="y-label" transform="translate(14 {TOP + plot_h / 2}) '
                 f'rotate(-90)" text-anchor="middle">{escape(y_label)}</text>'
                 f'<text class="x-label" x="{x0 + plot_w / 2}" y="{HEIGHT - 4}" '
                 f'text-anchor="middle">time (UTC)</text>')
    for i, name in enumerate(shown):
        points = drawn[name]
        colour = PALETTE[i % len(PALETTE)]
        # no more vertices than pixels: every stride-th point, and the newest
        stride = math.ceil(len(points) / plot_w)
        vertices = points[::stride] if points[::stride][-1] == points[-1] else \
            [*points[::stride], points[-1]]
        path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in vertices)
        last_t, last_v = points[-1]
        parts.append(f'<polyline class="series" data-series="{escape(name)}" '
                     f'data-last="{last_v:g}" data-max="{max(v for _, v in points):g}" '
                     f'points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>'
                     f'<circle cx="{x(last_t):.1f}" cy="{y(last_v):.1f}" r="3" '
                     f'fill="{colour}"/>')
        label = name if len(name) <= 22 else name[:21] + "…"
        legend_y = TOP + 6 + i * 16
        parts.append(f'<rect x="{x0 + plot_w + 14}" y="{legend_y - 8}" width="10" height="10" '
                     f'fill="{colour}"/><text class="legend" x="{x0 + plot_w + 30}" '
                     f'y="{legend_y + 1}"><title>{escape(name)}</title>{escape(label)} '
                     f'({_number(last_v)})</text>')
    if hidden:
        parts.append(f'<text x="{x0 + plot_w + 14}" y="{TOP + 6 + len(shown) * 16 + 1}" '
                     f'fill="#666">+{hidden} more</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def _waiting(sampler: Sampler) -> str:
    return f"No samples yet (one every {sampler.interval_ms / 1000:g} s)"


def throughput_chart(sampler: Sampler, topic: str | None = None) -> Markup:
    """Messages/s: per topic (the overview) or of one topic."""
    if topic is None:
        series = sampler.messages_in.all()
        title = "Throughput per topic"
    else:
        series = {"messages in": sampler.messages_in.get(topic)}
        title = f"Throughput of {topic}"
    return line_chart("throughput-chart", title, "messages/s", series,
                      empty_text=_waiting(sampler))


def bytes_chart(sampler: Sampler, topic: str | None = None) -> Markup:
    """Bytes/s from the brokers' metrics: in per topic (the overview), or in and out of one
    topic; nothing without metrics URLs."""
    if not sampler.metrics_urls:
        return Markup("")
    if topic is None:
        series = sampler.bytes_in.all()
        title = "Bytes in per topic"
    else:
        series = {"bytes in": sampler.bytes_in.get(topic),
                  "bytes out": sampler.bytes_out.get(topic)}
        title = f"Bytes in and out of {topic}"
    return line_chart("bytes-chart", title, "bytes/s", series, empty_text=_waiting(sampler))


def lag_chart(sampler: Sampler, group: str) -> Markup:
    """A group's total lag over time, and per topic when it has several."""
    series = {"total": sampler.group_lag.get(group)}
    per_topic = sampler.group_topic_lag.get(group)
    if per_topic is not None and len(per_topic.series) > 1:
        series.update(per_topic.all())
    return line_chart("lag-chart", f"Lag of {group}", "messages behind", series,
                      empty_text=_waiting(sampler))


CHARTS: dict[str, Callable[[Sampler, str | None], Markup]] = {
    "throughput": throughput_chart,
    "bytes": bytes_chart,
    "lag": lambda sampler, name: lag_chart(sampler, name or ""),
}

#: Re-fetches every `[data-chart]` element's chart (trusted SVG made by `line_chart`).
REFRESH_SCRIPT = Markup("""<script>
for (const box of document.querySelectorAll("[data-chart]")) {
  setInterval(async () => {
    try {
      const response = await fetch(box.dataset.chart);
      if (response.ok) box.innerHTML = await response.text();
    } catch (error) {}  // the console is away: keep the last chart, try again next time
  }, Number(box.dataset.refreshMs));
}
</script>""")


#: Shown instead of a chart when the console does not sample (its users log in).
NOT_SAMPLED = Markup('<p class="chart-off">No charts: while users log in, the console has no '
                     'clients of its own to sample the cluster with.</p>')


def chart_box(sampler: Sampler | None, kind: str, name: str | None = None) -> Markup:
    """A chart in a box that refreshes itself from `/chart` every sampling interval."""
    if sampler is None:
        return NOT_SAMPLED if kind != "bytes" else Markup("")
    query = f"kind={kind}" + ("" if name is None else "&name=" + quote(name, safe=""))
    chart = CHARTS[kind](sampler, name)
    if not chart:
        return chart
    refresh = max(sampler.interval_ms, MIN_REFRESH_MS)
    return Markup(f'<div class="chart-box" data-chart="/chart?{escape(query)}" '
                  f'data-refresh-ms="{refresh}">{chart}</div>')


def setup(app: web.Application, env: jinja2.Environment,
          sampler: Callable[[], Sampler | None]) -> None:
    """`chart(kind, name)` and `chart_refresh` for the templates, and the `/chart` route
    the pages refresh their charts from (`sampler()` is None when the console does not
    sample)."""
    env.globals["chart"] = lambda kind, name=None: chart_box(sampler(), kind, name)
    env.globals["chart_refresh"] = REFRESH_SCRIPT

    async def chart(request: web.Request) -> web.Response:
        kind = request.query.get("kind", "")
        if kind not in CHARTS:
            raise web.HTTPBadRequest(text=f"kind must be one of {', '.join(CHARTS)}")
        current = sampler()
        if current is None:
            raise web.HTTPNotFound(text="the console does not sample while users log in")
        svg = CHARTS[kind](current, request.query.get("name"))
        return web.Response(text=str(svg), content_type="image/svg+xml")

    app.add_routes([web.get("/chart", chart)])
