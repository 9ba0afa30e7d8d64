"""The CPU twin study: vLLM's and SGLang's CPU paths probed, calibrated and driven live with the same traces on
this machine, then simulated, with targets and tables side by side (``servetwin twin-study``). It uses the
calibration library (``calibrate``) and nothing in the library uses it. Its investigations are under
``calibrate.twin.diagnose`` (``servetwin twin-study diagnose NAME``)."""
