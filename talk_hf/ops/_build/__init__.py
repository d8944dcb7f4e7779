"""The build machinery of the compiled backends in ``csrc/``, one module per job.

Two extensions share the per-element math of ``csrc/talk_math.h``: ``"cpu"`` (C++, -O3, OpenMP,
the host's vector instructions unless ``$TALK_HF_PORTABLE_CPU=1``) for CPU tensors and ``"cuda"``
for CUDA tensors, each compiled from one folder of ``csrc/`` per op plus the module's bindings.

* :mod:`.build_folder`: what is compiled (sources, flags) and the build folder named by it;
* :mod:`.build_tools`: the checks of what finding, building and loading needs here;
* :mod:`.build_record`: whether a folder's library is finished and intact, and importing it;
* :mod:`.build_lock`: importing a finished build or building one under a file lock;
* :mod:`.unavailable`: the :class:`ExtensionUnavailable` every step raises.

Nothing here runs at import; :mod:`talk_hf.ops._extension` loads an extension on first use.  The
modules' names are unique across talk_hf because :func:`talk_hf.export_for_remote_code` copies
modules into one flat folder.
"""
