"""The statistics panel: is the bet paying off, right now? ``stats_panel`` shows
a reply's ``MetricsSnapshot`` as counters and charts, ``stats_charts`` holds
what the charts are made of. Of ``ui`` it may import only ``theme``; the
window imports it.
"""
