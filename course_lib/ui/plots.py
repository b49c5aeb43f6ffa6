"""Figures for the lessons: built without pyplot, so nothing is shown twice.

A ``matplotlib.figure.Figure`` created directly is not registered with pyplot, so the inline
backend never auto-displays it; lessons and widgets ``display`` it exactly once.
"""
from __future__ import annotations

import io
import math
from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullFormatter


def _figure_png(fig: Figure) -> bytes | tuple[bytes, dict]:
    """The PNG of ``fig``, tidied first (``tidy``), with what still reads badly
    (``layout_problems``) in the display metadata when anything does."""
    tidy(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    problems = layout_problems(fig)
    return (buf.getvalue(), {LAYOUT_KEY: problems}) if problems else buf.getvalue()


def tidy(fig: Figure) -> None:
    """Fix, on the drawn figure, what a crowded figure gets wrong by itself: x tick labels that
    run into each other are turned (30°, then 90°); labels placed on the data that overlap are
    moved apart; a legend drawn over the data moves beside the panel; a title wider than the
    figure is wrapped. Every lesson figure passes through it on its way to the screen."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()

    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):   # a log axis reads 64, 128 and 0.5, not 2^6 or 5 x 10^-1
            if axis.get_scale() != "log":
                continue
            if getattr(axis._scale, "base", 10) == 2:
                axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,g}"))
                continue
            for get, put in ((axis.get_major_formatter, axis.set_major_formatter),
                             (axis.get_minor_formatter, axis.set_minor_formatter)):
                shown = get()                  # it decides which ticks get a label at all
                if not isinstance(shown, FuncFormatter):
                    put(FuncFormatter(
                        lambda v, pos, shown=shown: f"{v:,g}" if shown(v, pos) else ""))
    canvas.draw()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):   # a log axis labels its minor ticks too: 2, 3, 4 x 10^k
            minor = [t for t in axis.get_minorticklabels()
                     if t.get_visible() and t.get_text().strip()]
            drawn = [t for t in axis.get_majorticklabels()
                     if t.get_visible() and t.get_text().strip()]
            if minor and _tick_collisions(sorted_by_position(drawn + minor, axis), renderer):
                axis.set_minor_formatter(NullFormatter())
        canvas.draw()
        labels = [t for t in ax.get_xticklabels() if t.get_visible() and t.get_text().strip()]
        for angle in (30, 90):
            if not _tick_collisions(labels, renderer):
                break
            for t in labels:
                t.set(rotation=angle, ha="right" if angle < 90 else "center",
                      rotation_mode="anchor" if angle < 90 else "default")
            canvas.draw()
        top = ax.get_window_extent(renderer).y1   # a label above the panel would meet its title
        for t in ax.texts:
            above = t.get_window_extent(renderer).y1 - top
            if t.get_visible() and above > 0:
                _shift_up(t, ax, -(above + 2.0))
        _spread(ax, renderer)
        legend = ax.get_legend()
        if legend is not None and legend.get_visible() and _data_under(
                ax, legend.get_window_extent(renderer)):
            handles, texts = legend.legend_handles, [t.get_text() for t in legend.get_texts()]
            ax.legend(handles, texts, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                      fontsize="small", title=legend.get_title().get_text() or None)
    canvas.draw()   # the layout after the moves above, then the titles that no longer fit
    for ax in fig.axes:
        for title in (ax.title, ax._left_title, ax._right_title):
            _wrap_to(title, fig, renderer)
    if fig._suptitle is not None:
        _wrap_to(fig._suptitle, fig, renderer)
    canvas.draw()


def sorted_by_position(labels, axis) -> list:
    """Tick labels in the order of their ticks along ``axis``."""
    i = 0 if axis.axis_name == "x" else 1
    return sorted(labels, key=lambda t: t.get_transform().transform(t.get_position())[i])


def _tick_collisions(labels, renderer) -> list[tuple]:
    """Pairs of neighbouring tick labels that print over each other. Level labels collide when
    their boxes overlap; turned ones (parallel lines of text) when the gap between their anchors,
    seen across the slant (``gap * sin(angle)``), is less than a line of text."""
    import math

    if not labels:
        return []
    angle = labels[0].get_rotation() % 180
    if angle == 0:
        b = [t.get_window_extent(renderer) for t in labels]
        return [(labels[i], labels[j]) for i in range(len(b)) for j in range(i + 1, len(b))
                if _overlap(b[i], b[j])]
    anchors = sorted(((t.get_transform().transform(t.get_position())[0], t) for t in labels),
                     key=lambda a: a[0])
    line = labels[0].get_fontsize() * labels[0].get_figure(root=True).dpi / 72
    return [(a[1], b[1]) for a, b in zip(anchors, anchors[1:])
            if (b[0] - a[0]) * math.sin(math.radians(angle)) < 0.9 * line]


def _wrap_to(text, fig: Figure, renderer) -> None:
    """Break ``text`` into lines that fit the figure's width."""
    import textwrap

    content = text.get_text()
    if not content.strip():
        return
    box = text.get_window_extent(renderer)
    width, centre = box.width, (box.x0 + box.x1) / 2
    # a centred title spreads both ways from its centre: it fits twice the nearer edge's distance
    room = 0.95 * min(fig.bbox.width, 2 * min(centre - fig.bbox.x0, fig.bbox.x1 - centre))
    if width <= room:
        return
    longest = max(len(line) for line in content.splitlines())
    chars = max(10, int(longest * room / width))
    text.set_text("\n".join(textwrap.fill(line, chars) for line in content.splitlines()))


def _shift_up(t, ax, pixels: float) -> bool:
    """Move a text (or an annotation's text) up by ``pixels``; False when its coordinates are
    neither data nor an offset."""
    from matplotlib.text import Annotation

    if isinstance(t, Annotation) and t.anncoords in ("offset points", "offset pixels"):
        dx, dy = t.xyann
        t.xyann = (dx, dy + (pixels * 72 / ax.figure.dpi if t.anncoords == "offset points"
                             else pixels))
        return True
    coords = t.anncoords if isinstance(t, Annotation) else None
    if coords in (None, "data") and (isinstance(t, Annotation)
                                     or t.get_transform() is ax.transData):
        x, y = ax.transData.transform(t.xyann if isinstance(t, Annotation) else t.get_position())
        new = ax.transData.inverted().transform((x, y + pixels))
        if isinstance(t, Annotation):
            t.xyann = tuple(new)
        else:
            t.set_position(new)
        return True
    return False


def _spread(ax, renderer, *, passes: int = 20) -> None:
    """Move overlapping texts of ``ax`` apart vertically, a few pixels at a time."""
    texts = [t for t in ax.texts if t.get_visible() and t.get_text().strip()]
    for _ in range(passes):
        moved = False
        b = [t.get_window_extent(renderer) for t in texts]
        for i in range(len(texts)):
            for j in range(i + 1, len(texts)):
                if _overlap(b[i], b[j]):
                    lower, upper = (i, j) if b[i].y0 <= b[j].y0 else (j, i)
                    shift = b[lower].y1 - b[upper].y0 + 2.0
                    top = ax.get_window_extent(renderer).y1
                    # up, unless that leaves the panel: then the lower one goes down
                    k, step = (upper, shift) if b[upper].y1 + shift <= top else (lower, -shift)
                    if _shift_up(texts[k], ax, step):
                        b[k] = texts[k].get_window_extent(renderer)
                        moved = True
        if not moved:
            return


# The key under which the PNG formatter stores a figure's layout problems in the image's
# display metadata (read by ``course_lib.tools.hygiene``; invisible to the learner).
LAYOUT_KEY = "course_layout_problems"


def _overlap(a, b, slack: float = 1.0) -> bool:
    """Whether two display-space boxes share more than ``slack`` pixels in both directions."""
    return min(a.x1, b.x1) - max(a.x0, b.x0) > slack and min(a.y1, b.y1) - max(a.y0, b.y0) > slack


def _inside(points: np.ndarray, box) -> bool:
    points = points[np.isfinite(points).all(axis=1)]
    return bool(((points[:, 0] > box.x0) & (points[:, 0] < box.x1)
                 & (points[:, 1] > box.y0) & (points[:, 1] < box.y1)).any())


def _data_under(ax, box) -> str:
    """What of ``ax``'s data lies under the display box ``box`` ('' when nothing does)."""
    for line in ax.get_lines():
        xy = np.column_stack([np.asarray(line.get_xdata(), float),
                              np.asarray(line.get_ydata(), float)])
        if not line.get_visible() or not len(xy):
            continue
        pts = line.get_transform().transform(xy)
        if line.get_linestyle() not in ("None", "none", "", " ") and len(pts) > 1:
            steps = np.linspace(0, 1, 9)[:, None, None]     # the segments too, not only the points
            pts = (pts[:-1] + steps * (pts[1:] - pts[:-1])).reshape(-1, 2)
        if _inside(pts, box):
            return f"the line {line.get_label()!r}"
    for patch in ax.patches:
        extent = patch.get_window_extent()
        if patch.get_visible() and extent.width > 0 and extent.height > 0 and _overlap(extent, box):
            return "a bar"
    for coll in ax.collections:
        offsets = np.asarray(coll.get_offsets(), float)
        if coll.get_visible() and offsets.ndim == 2 and len(offsets) \
                and _inside(coll.get_offset_transform().transform(offsets), box):
            return "scatter points"
    return ""


def layout_problems(fig: Figure) -> list[str]:
    """What a reader could not read in ``fig``, measured on the drawn figure: text cut by the
    figure's edge, tick labels printed over each other, texts of one panel over each other, a
    legend over the data. Empty when the figure reads cleanly."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    edge = fig.bbox.padded(1)
    drawn = {}   # the tick labels drawn (ticks outside the view keep invisible-in-effect labels)
    for ax in fig.axes:
        for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            ticks = axis._update_ticks()   # the ticks matplotlib draws (no public equivalent)
            drawn[(ax, name)] = [lab for t in ticks for lab in (t.label1, t.label2)
                                 if lab.get_visible() and lab.get_text().strip()]
    every_tick_label = {id(lab) for ax in fig.axes for axis in (ax.xaxis, ax.yaxis)
                        for t in axis.get_major_ticks() + axis.get_minor_ticks()
                        for lab in (t.label1, t.label2)}
    shown = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()
             and id(t) not in every_tick_label] + [lab for labs in drawn.values() for lab in labs]
    problems = []
    for t in shown:
        b = t.get_window_extent(renderer)
        if b.x0 < edge.x0 or b.x1 > edge.x1 or b.y0 < edge.y0 or b.y1 > edge.y1:
            problems.append(f"text cut by the figure's edge: {t.get_text()[:50]!r}")
    for n, ax in enumerate(fig.axes):
        name = ax.get_title() or ax.get_ylabel() or f"panel {n}"
        for axis in ("x", "y"):
            for a, b in _tick_collisions(drawn[(ax, axis)], renderer):
                problems.append(f"{name[:40]!r}: {axis} tick labels {a.get_text()[:25]!r} and "
                                f"{b.get_text()[:25]!r} overlap")
        own = [t for t in ax.texts if t.get_visible() and t.get_text().strip()]
        for t in own:
            if ax.title.get_text().strip() and _overlap(t.get_window_extent(renderer),
                                                        ax.title.get_window_extent(renderer)):
                problems.append(f"{name[:40]!r}: the text {t.get_text()[:25]!r} runs into "
                                "the title")
        for what, texts in (("texts", ax.texts),):
            texts = [t for t in texts if t.get_visible() and t.get_text().strip()]
            boxes = [t.get_window_extent(renderer) for t in texts]
            for i in range(len(texts)):
                for j in range(i + 1, len(texts)):
                    if _overlap(boxes[i], boxes[j]):
                        problems.append(f"{name[:40]!r}: {what} {texts[i].get_text()[:25]!r} and "
                                        f"{texts[j].get_text()[:25]!r} overlap")
        legend = ax.get_legend()
        if legend is not None and legend.get_visible():
            covered = _data_under(ax, legend.get_window_extent(renderer))
            if covered:
                problems.append(f"{name[:40]!r}: the legend covers {covered}")
    return problems


def register_figure_png() -> None:
    """Teach IPython's ``display`` to render a pyplot-free ``Figure`` as a PNG image.

    pyplot's inline backend normally registers this; our figures bypass pyplot, so without it
    ``display(fig)`` would show only ``<Figure size ...>``. A no-op outside IPython.
    """
    try:
        from IPython import get_ipython
    except ImportError:
        return
    ip = get_ipython()
    if ip is None:
        return
    ip.display_formatter.formatters["image/png"].for_type(Figure, _figure_png)


def new_figure(ncols: int = 1, *, width: float = 6.0, height: float = 3.6, nrows: int = 1):
    """A figure and its axes (a single Axes when there is one panel)."""
    if ncols < 1 or nrows < 1:
        raise ValueError(f"ncols and nrows must be >= 1, got {ncols}, {nrows}")
    register_figure_png()
    fig = Figure(figsize=(width * ncols, height * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=True)
    return fig, axes


def length_histogram(lengths: Sequence[int], *, ax, bins: int = 60, title: str = "",
                     item: str = "review") -> None:
    """Histogram of token counts per ``item`` (a review, a sentence) with its median and 99th
    percentile marked."""
    a = np.asarray(list(lengths))
    ax.hist(a, bins=bins, color="#4C72B0", alpha=0.85)
    med = float(np.median(a))
    ax.axvline(med, color="k", ls="--", lw=1, label=f"median {med:.0f}")
    ax.axvline(np.percentile(a, 99), color="#C44E52", ls=":", lw=1.5,
               label=f"99th percentile {np.percentile(a, 99):.0f}")
    ax.set_xlabel(f"tokens per {item}")
    ax.set_ylabel(f"number of {item}s")
    ax.set_title(title or f"{item.capitalize()} lengths")
    ax.legend(frameon=False)


def bar_compare(names: Sequence[str], values: Sequence, *, ax, ylabel: str,
                title: str = "", fmt: str = "{:.2f}") -> None:
    """Labelled bars with their values printed on top. A value that is a
    ``verdicts.Estimate`` (a speed-up from ``bench.compare``) gets its 95% interval as an
    error bar (asymmetric for a ratio) and the value is printed above the bar's top end."""
    heights = [float(getattr(v, "value", v)) for v in values]
    errors = [getattr(v, "errors", (0.0, 0.0)) for v in values]
    has_err = any(e != (0.0, 0.0) and all(math.isfinite(x) for x in e) for e in errors)
    errors = [e if all(math.isfinite(x) for x in e) else (0.0, 0.0) for e in errors]
    bars = ax.bar(list(names), heights, color="#4C72B0",
                  yerr=list(zip(*errors)) if has_err else None, capsize=4 if has_err else 0)
    for b, h, (_, up) in zip(bars, heights, errors):
        ax.annotate(fmt.format(h), (b.get_x() + b.get_width() / 2, h + up), xytext=(0, 3),
                    textcoords="offset points", ha="center", va="bottom", fontsize=9)
    ax.margins(y=0.12)   # room above the highest label (a margin, so a log axis set later keeps it)
    ax.set_ylabel(ylabel)
    ax.set_title(title + ("\n(error bars: 95% interval)" if has_err else ""))


def training_curve(losses: Sequence[float], *, ax, label: str = "", smooth: int = 10,
                   color: str | None = None) -> None:
    y = np.asarray(losses, dtype=float)
    if smooth > 1 and len(y) >= smooth:
        y = np.convolve(y, np.ones(smooth) / smooth, mode="valid")
    ax.plot(np.arange(len(y)), y, label=label, color=color)
    ax.set_xlabel("training step")
    ax.set_ylabel(f"loss (moving mean of {smooth})" if smooth > 1 else "loss")


def mask_picture(mask, *, ax, title: str = "") -> None:
    """One row per sequence of a batch, one column per position: blue = real token (True),
    white = padding. The picture of lessons 01 and 02."""
    ax.imshow(mask.cpu().numpy(), aspect="auto", cmap="Blues", vmin=0, vmax=1.4,
              interpolation="nearest")
    ax.set_xlabel("position in the padded batch")
    ax.set_ylabel("review in the batch")
    if title:
        ax.set_title(title)


def sparsity_bars(report: Sequence[dict], *, ax, title: str = "") -> None:
    """One bar per weight tensor of a ``pruning.sparsity_report``: its share of zeros; the
    tensors left unpruned are named in the axis label (their bars, at 0, do not show)."""
    names = [r["name"].replace("blocks.", "L").replace("attn.", "").replace("ff.", "")
             .replace(".weight", "") for r in report]
    ax.bar(range(len(report)), [r["sparsity"] for r in report],
           color=["#4C72B0" if r["pruned"] else "#BBBBBB" for r in report])
    ax.set_xticks(range(len(report)), names, rotation=90, fontsize=7)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("share of weights that are zero")
    unpruned = [n for n, r in zip(names, report) if not r["pruned"]]
    ax.set_xlabel("weight tensor" + (f" (not pruned: {', '.join(unpruned)})" if unpruned else ""))
    ax.set_title(title)


def spaced_log_ticks(lo: float, hi: float, *, per_axis: int = 12) -> list[float]:
    """Round values (1, 1.5, 2, 3, 5 times a power of ten) inside ``[lo, hi]`` for a log axis,
    each at least ``1 / per_axis`` of the axis's log range from the one before, so labels never
    run into each other however many decades the data spans (1 is kept whenever it is inside)."""
    if not 0 < lo < hi:
        raise ValueError(f"lo and hi must satisfy 0 < lo < hi, got {lo}, {hi}")
    gap = math.log10(hi / lo) / per_axis
    decades = range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
    candidates = sorted({round(m * 10.0 ** e, 12) for e in decades for m in (1, 1.5, 2, 3, 5)})
    inside = [t for t in candidates if lo <= t <= hi]
    kept: list[float] = [1.0] if lo <= 1 <= hi else []
    for t in inside:
        if all(abs(math.log10(t / k)) >= gap for k in kept):
            kept.append(t)
    return sorted(kept)
