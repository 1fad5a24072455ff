"""Figure 1's curves, one per init: two that coincide (two inits that never learn, each at BLEU 0) must
still show as two, so each init's line has its own marker and dash besides its color."""

from __future__ import annotations

from types import SimpleNamespace

from embinit import plots


def test_coinciding_curves_are_told_apart_by_marker_and_dash(tmp_path, monkeypatch):
    real, closed = plots.pyplot(), []
    monkeypatch.setattr(plots, "pyplot", lambda: SimpleNamespace(subplots=real.subplots, close=closed.append))
    flat = [{1: 0.0, 2: 0.0, 3: 0.0}] * 2
    plots.figure1([("test/bleu", {"Xavier": flat, "GloVe_Shuffled": flat, "GloVe": flat})], tmp_path / "f.png", "t")
    (fig,) = closed
    lines = fig.axes[0].get_lines()
    assert len(lines) == 3 and (tmp_path / "f.png").stat().st_size > 0
    assert len({(line.get_marker(), line.get_linestyle()) for line in lines}) == 3
    assert len({line.get_color() for line in lines}) == 3
    styles = [plots.line_style(i) for i in range(8)]
    assert len({(s["marker"], s["linestyle"]) for s in styles}) == 8
    real.close(fig)
