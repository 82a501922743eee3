"""2-D halo exchange + 3x3 convolution on an image sharded in rows.

Rank r holds rows [r * H/W, (r + 1) * H/W) of a batch of images x (batch, in_channels, H/W, width), and
the replicated convolution weight (out_channels, in_channels, 3, 3) and bias (out_channels,). It needs
one row from each neighbour (zero padding at the top and bottom of the global image and at the left and
right edges). Output: this rank's rows of conv2d(global image, weight, bias, padding=1), shape
(batch, out_channels, H/W, width), dtype of x.
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F

from pkit.problem_kit import cost as _cost, generator, parse_dtype, randn

META = {
    "name": "conv2d_halo_exchange",
    "category": "applications",
    "models": "spatially partitioned convolution / stencil codes (halo exchange as in MPI stencils, "
              "spatial parallelism for large-image CNNs)",
    "dtypes": ["bfloat16", "float32"],
    "dtype_reason": ("bfloat16: activations and weights of bf16 CNN training (cuDNN convolution in bf16, fp32 "
                     "accumulation)"),
    "world_sizes": [2, 4, 8],
    "traffic": "neighbour",
    "description": "Rank holds image rows x (batch, c_in, H/W, width) and a replicated 3x3 conv weight and "
                   "bias; return its rows of the zero-padded 3x3 convolution of the global image.",
}

SIZES = {
    "tiny": {"batch": 1, "in_channels": 2, "out_channels": 3, "height": 16, "width": 5},
    "large": {"batch": 4, "in_channels": 64, "out_channels": 64, "height": 1024, "width": 1024},
}


def make_inputs(rank, world_size, size, dtype, seed, device="cpu"):
    s = SIZES[size]
    x = randn((s["batch"], s["in_channels"], s["height"] // world_size, s["width"]), dtype,
              generator(seed, rank), device)
    shared = generator(seed, -1)  # stream shared by all ranks
    weight = randn((s["out_channels"], s["in_channels"], 3, 3), dtype, shared, device,
                   scale=(9 * s["in_channels"]) ** -0.5)
    bias = randn((s["out_channels"],), dtype, shared, device)
    return x, weight, bias


def reference(x, weight, bias):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    above = x.new_zeros(x.shape[0], x.shape[1], 1, x.shape[3])
    below = x.new_zeros(x.shape[0], x.shape[1], 1, x.shape[3])
    ops = []
    if rank > 0:
        ops += [dist.P2POp(dist.isend, x[:, :, :1].contiguous(), rank - 1), dist.P2POp(dist.irecv, above, rank - 1)]
    if rank < world_size - 1:
        ops += [dist.P2POp(dist.isend, x[:, :, -1:].contiguous(), rank + 1), dist.P2POp(dist.irecv, below, rank + 1)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    return F.conv2d(torch.cat((above, x, below), dim=2), weight, bias, padding=(0, 1))


def cost(world_size, size, dtype="bfloat16"):
    # FLOPs: 2 * 9 * c_in * c_out per output pixel. HBM: read the local rows and the weights, write
    # the output. Links: an interior rank sends one row (batch * c_in * width) to each neighbour, an
    # end rank to one.
    # Sync steps: 1, both neighbours' rows arrive in one round.
    s = SIZES[size]
    e = parse_dtype(dtype).itemsize
    rows = s["height"] // world_size
    plane = s["batch"] * rows * s["width"]
    row = s["batch"] * s["in_channels"] * s["width"] * e
    return _cost(flops=2 * 9 * s["in_channels"] * s["out_channels"] * plane,
                 hbm_bytes=e * (plane * (s["in_channels"] + s["out_channels"])
                                + s["out_channels"] * (9 * s["in_channels"] + 1)),
                 link_bytes=row * min(2, world_size - 1), sync_steps=1)
