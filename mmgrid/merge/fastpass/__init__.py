"""The fast merge pass: cache-sized chunks, reused buffers, few fused passes.

The reference path (:mod:`mmgrid.merge.reference`) reads a whole tensor per input and
merges row chunks of up to 4M entries with fresh float32 temporaries. On a 2-core
machine that is bound by page faults (fresh allocations) and memory traffic. The fast
pass calls the same function on each chunk (:func:`mmgrid.merge.pipeline.apply_kernel`
on the method's :class:`~mmgrid.merge.pipeline.Kernel`, so results are bitwise equal to
the reference path; tests/merge/test_fastpass.py checks it), on chunks of
:data:`kernels.CHUNK` entries that fit in the L2 cache (or ``Route.chunk``), moving data
in blocks of about :data:`reads.BLOCK_BYTES`; it computes no entry itself:

* merged to a file (:func:`writer.write_blocks` + :func:`tensor.merge_block`): worker
  threads each read a block of every input with positioned reads into their own reused
  buffers, merge it chunk by chunk and cast it into an output block; a writer thread
  (:class:`writer.AsyncWriter`) writes the blocks in file order to the streaming
  safetensors writer. No whole tensor is held, and a thread hand-off happens per block,
  not per chunk;
* merged in memory (:func:`tensor.merge_tensor`): the next block is read on a background
  thread while this one is merged;
* the float32 work buffers are allocated once per thread.

Modules: :mod:`.kernels` (the chunk loop and its buffers), :mod:`.reads` (file reads), :mod:`.writer`
(threads and the ordered writer), :mod:`.tensor` (one tensor or block). Which tensors
take this pass is decided in :mod:`mmgrid.merge.executor`.
"""
