"""``servetwin serve``: a simulated engine behind an OpenAI-compatible API, on a virtual clock."""
