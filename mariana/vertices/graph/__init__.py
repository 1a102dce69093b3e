"""Graph algorithms, one module each (``pagerank``, ``sssp``, ``bfs``, ``wcc``, ``cdlp``, ``lcc``):
its vertex program, its block program and its master compute. ``block`` is the block programs'
framework (``LoadedBlock``, ``LocalGraph``), ``kernels`` and ``triangles`` their whole-block kernels.
"""
