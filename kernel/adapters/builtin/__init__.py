"""Built-in adapters, each a handler for the SDK (`aos adapter run KIND`):

* `http` (`HttpEffect`): a real HTTP client; params `{method, url, headers, body?}`, receipt
  payload `{status, headers, body}`.
* `python` (`PythonFunctionEffect`): runs a configured `module:function` in a subprocess.

The kernel's own `timer` is not here: the world settles it against logical time.
"""
