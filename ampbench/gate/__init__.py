"""The gate: what every timed figure passes through, without torch. A clock's rounds become a frozen
``measurement.Measurement``; the sequential test's rule (``looks``) says when its rounds decide; the judge
(``judge``) gives its verdict, confirmation and group rule included, and which figures gate a cell; the
writers (``writers``) put it into the cell's record and a recording's baseline entry. The speed cells, the
distributed cells, bisect and ``ampbench compare`` judge through it; the loops that drive a clock stay with
their cells (``speed.sequential``)."""
