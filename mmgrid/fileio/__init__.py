"""File formats and file I/O shared by every layer: writing a file or folder so that readers see the
old state or the whole new one (:mod:`mmgrid.fileio.atomic`, the one home of a rename into place), and
the safetensors format (:mod:`mmgrid.fileio.safetensors`: the dtype names, the header's reader and
writer). Foundation layer: the standard library only (torch lazily, where a dtype is turned into
a torch one).
"""
