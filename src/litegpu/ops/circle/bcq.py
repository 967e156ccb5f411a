"""Circle's BCQ_FULLY_CONNECTED (code -3) and BCQ_GATHER (code -4): refused, because their arithmetic is
defined nowhere that can be read.

BCQ is binary-coding quantization: a weight row w is approximated by sum_i alpha_i * b_i with b_i in {-1, +1}.
What ONE's public sources say about the two ops (checked in Samsung/ONE):

- luci (``compiler/luci/lang``, ``FuseBCQPass.cpp``) defines the inputs: BCQ_FULLY_CONNECTED (input,
  weights_scales, weights_binary, bias, weights_clusters; options weights_hidden_size, fused activation) and
  BCQ_GATHER (input_scales, input_binary, indices, input_clusters; options input_hidden_size, axis).  The
  fusing pass copies the scales ("alpha", 1-D), the packed binary code (int32, 2-D) and the clusters (int32
  [n, 2]: qbits and size of each cluster) unchanged from ``bcqinfo_*`` constants that a TensorFlow model made
  by an external tool carries; it transposes the FULLY_CONNECTED's input and output around the op (the op
  computes W x with x as [hidden, batch]).  An older version of the pass packed the bits itself (32 per int32,
  the hidden index's low bit first, bit 1 meaning +alpha), for a layout ([out, bits, hidden / 32]) that the
  current 2-D packed code and the clusters no longer have.
- onert's shape inference gives the output sizes (the clusters' sizes summed) and says "more shape validation
  will be done inside kernel"; but no kernel is public: onert's CPU backend answers "NYI for operation
  'BCQFullyConnected'" (also the 0.1.0 wheel on PyPI), onert routed BCQ ops to a separate "bcq" backend
  (Samsung/ONE pull request 4055) that is not in the repository, and neither luci-interpreter nor cker has a
  BCQ kernel.

So how a cluster's rows take their qbits alphas from the 1-D scales, and how the 2-D packed code's int32 words
map to rows, bit planes and hidden positions, cannot be established: any kernel written here would be a guess.
"""

from __future__ import annotations

from ..registry import refuse

_WHY = ("no public kernel defines its arithmetic (onert's CPU backend refuses it as not yet implemented, its "
        "'bcq' backend is not public, luci only copies the packed binary code and clusters from an external "
        "tool's constants), so how the scales, the 2-D packed bits and the clusters combine cannot be "
        "established; see litegpu/ops/circle/bcq.py")

refuse("BCQ_FULLY_CONNECTED", _WHY)
refuse("BCQ_GATHER", _WHY)
