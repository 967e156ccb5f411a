"""Custom ops: MediaPipe's, TensorFlow Addons' resampler, and the ones registered from Python
(``register_custom_op``).  Their modules register themselves (``ops._catalog``)."""
