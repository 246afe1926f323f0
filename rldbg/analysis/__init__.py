"""The analyses `rldbg report` runs over a read trace (rldbg.trace.report_trace.Trace), one
module per question: transitions (what each offload, sleep and reload returned to the device, and
the detector of memory never returned), gpus (GPU memory by process). Each module has analyse()
for the report's JSON and render() for its text; the HTML report renders the same dicts."""
