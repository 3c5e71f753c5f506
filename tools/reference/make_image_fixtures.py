#!/usr/bin/python3
# Builds tests/data/image/: small synthetic images written by Pillow (PNG RGB/RGBA/grey/palette,
# progressive and grey JPEG, lossless and lossy WebP, an interlaced palette GIF) or byte by byte
# (Adam7-interlaced and 16-bit PNGs, which Pillow does not write), the pixels Pillow
# decodes from them (Image.open(...).convert("RGB")), Pillow's BICUBIC and BILINEAR resizes of them,
# the Qwen2-VL and Gemma 3 preprocessing done in numpy as transformers' Qwen2VLImageProcessor and
# Gemma3ImageProcessor do it (on Pillow's resized uint8), and headers that declare huge images.
# The oracle of tests/image/. Needs Debian's python3-pil and python3-numpy (tools/install_deps.sh).
# Usage: tools/reference/make_image_fixtures.py [OUT_DIR]   (default tests/data/image)
import json
import math
import os
import struct
import sys
import zlib

import numpy as np
from PIL import Image

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "../../tests/data/image")
rng = np.random.default_rng(28)


def synthetic_rgb(width, height):
    """Gradients plus noise, so both smooth areas and every-pixel detail reach the filters."""
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([x * 255 // max(width - 1, 1), y * 255 // max(height - 1, 1), (x + y) * 127 // (width + height)], -1)
    noise = rng.integers(-40, 41, size=(height, width, 3))
    return np.clip(base + noise, 0, 255).astype(np.uint8)


def write_raw(name, array):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(np.ascontiguousarray(array).tobytes())


manifest = {"decode": [], "resize": [], "qwen2_vl": [], "gemma3": [], "bombs": []}


def add_decode(file_name, exact=True):
    path = os.path.join(OUT, file_name)
    decoded = np.asarray(Image.open(path).convert("RGB"))
    write_raw(file_name + ".rgb", decoded)
    manifest["decode"].append({"file": file_name, "width": decoded.shape[1], "height": decoded.shape[0],
                               "rgb": file_name + ".rgb", "exact": exact})
    return decoded


def save(image, file_name, **options):
    image.save(os.path.join(OUT, file_name), **options)
    return add_decode(file_name)


os.makedirs(OUT, exist_ok=True)
rgb = synthetic_rgb(37, 53)
alpha = synthetic_rgb(37, 53)[:, :, 0]
save(Image.fromarray(rgb), "rgb_37x53.png")
save(Image.fromarray(np.dstack([rgb, alpha])), "rgba_37x53.png")
save(Image.fromarray(synthetic_rgb(29, 31)[:, :, 1]), "gray_29x31.png")
palette_image = Image.fromarray(synthetic_rgb(33, 21)).quantize(colors=50)
save(palette_image, "palette_tRNS_33x21.png", transparency=3)
save(Image.fromarray(synthetic_rgb(64, 40)), "progressive_64x40.jpg", quality=90, progressive=True)
save(Image.fromarray(synthetic_rgb(23, 17)[:, :, 2]), "gray_23x17.jpg", quality=85)
save(Image.fromarray(np.dstack([rgb, alpha])), "lossless_rgba_37x53.webp", lossless=True)
save(Image.fromarray(rgb), "lossy_37x53.webp", quality=80)
# More than 16 rows, so Pillow writes the frame interlaced.
save(Image.fromarray(synthetic_rgb(45, 38)).quantize(colors=64), "palette_45x38.gif", transparency=5)

# Resizes of the RGB PNG's pixels (down, up, one axis, mixed) and of a larger image downscaled by
# several whole and fractional factors, where the antialiasing support matters.
large = synthetic_rgb(200, 150)
save(Image.fromarray(large), "rgb_200x150.png")
resize_cases = [("rgb_37x53.png", rgb, (19, 27)), ("rgb_37x53.png", rgb, (5, 7)), ("rgb_37x53.png", rgb, (80, 111)),
                ("rgb_37x53.png", rgb, (37, 90)), ("rgb_37x53.png", rgb, (100, 20)),
                ("rgb_200x150.png", large, (64, 48)), ("rgb_200x150.png", large, (67, 149)),
                ("rgb_200x150.png", large, (40, 30))]
for source, pixels, (width, height) in resize_cases:
    for filter_name, resample in (("bicubic", Image.BICUBIC), ("bilinear", Image.BILINEAR)):
        out = np.asarray(Image.fromarray(pixels).resize((width, height), resample))
        name = f"resize_{source.split('.')[0]}_{filter_name}_{width}x{height}.rgb"
        write_raw(name, out)
        manifest["resize"].append({"source": source, "filter": filter_name, "width": width, "height": height,
                                   "rgb": name})

# Qwen2VLImageProcessor, step by step as transformers does it.
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]


def smart_resize(height, width, factor=28, min_pixels=56 * 56, max_pixels=14 * 14 * 4 * 1280):
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = math.floor(height / beta / factor) * factor
        w_bar = math.floor(width / beta / factor) * factor
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def rescale_normalise(image, mean, std):
    rescaled = (image.astype(np.float64) * (1 / 255)).astype(np.float32)
    return (rescaled - np.array(mean, dtype=np.float32)) / np.array(std, dtype=np.float32)


def qwen2_vl(pixels, max_pixels, patch=14, temporal=2, merge=2):
    height, width = smart_resize(pixels.shape[0], pixels.shape[1], patch * merge, max_pixels=max_pixels)
    resized = np.asarray(Image.fromarray(pixels).resize((width, height), Image.BICUBIC))
    image = rescale_normalise(resized, CLIP_MEAN, CLIP_STD).transpose(2, 0, 1)  # channels first
    patches = np.tile(image[None], (temporal, 1, 1, 1))
    grid_h, grid_w = height // patch, width // patch
    patches = patches.reshape(1, temporal, 3, grid_h // merge, merge, patch, grid_w // merge, merge, patch)
    patches = patches.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
    return patches.reshape(grid_h * grid_w, 3 * temporal * patch * patch), (1, grid_h, grid_w), (height, width)


def write_sampled(name, values, max_values=8192):
    """Every stride-th value, so a large tensor costs a few KB; the stride is in the manifest."""
    flat = values.reshape(-1)
    stride = max(1, -(-flat.size // max_values))
    write_raw(name, flat[::stride].astype("<f4"))
    return stride, int(flat.size)


for source, pixels, max_pixels in (("rgb_37x53.png", rgb, 14 * 14 * 4 * 1280),
                                   ("rgb_200x150.png", large, 14 * 14 * 4 * 1280),
                                   ("rgb_200x150.png", large, 28 * 28 * 16)):
    values, grid, resized = qwen2_vl(pixels, max_pixels)
    name = f"qwen2_vl_{source.split('.')[0]}_{max_pixels}.f32"
    stride, num_values = write_sampled(name, values, max_values=32768)
    manifest["qwen2_vl"].append({"source": source, "max_pixels": max_pixels, "grid_thw": list(grid),
                                 "resized": list(resized), "shape": list(values.shape), "values": name,
                                 "stride": stride, "num_values": num_values})

for source, pixels in (("rgb_37x53.png", rgb), ("rgb_200x150.png", large)):
    resized = np.asarray(Image.fromarray(pixels).resize((896, 896), Image.BILINEAR))
    values = rescale_normalise(resized, [0.5] * 3, [0.5] * 3).transpose(2, 0, 1)
    name = f"gemma3_{source.split('.')[0]}.f32"
    stride, num_values = write_sampled(name, values)
    manifest["gemma3"].append({"source": source, "values": name, "stride": stride, "num_values": num_values})


# Headers that declare far more pixels than any limit allows, followed by a little data.
def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


bombs = {
    "bomb_100000x100000.png": b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", 100000, 100000, 8, 2, 0, 0, 0))
    + png_chunk(b"IDAT", zlib.compress(b"\0" * 64)) + png_chunk(b"IEND", b""),
    "bomb_65535x65535.gif": b"GIF89a" + struct.pack("<HHBBB", 65535, 65535, 0, 0, 0)
    + b"," + struct.pack("<HHHHB", 0, 0, 65535, 65535, 0) + b"\x02\x02\x44\x01\x00;",
    "bomb_65000x65000.jpg": b"\xff\xd8" + b"\xff\xc0" + struct.pack(">HBHHB", 17, 8, 65000, 65000, 3)
    + b"\x01\x22\x00\x02\x11\x01\x03\x11\x01"
    + b"\xff\xda" + struct.pack(">HB", 12, 3) + b"\x01\x00\x02\x11\x03\x11" + b"\x00\x3f\x00" + b"\xff\xd9",
}
# A lossless WebP header (VP8L) of 16384 x 16384, its largest size.
vp8l = b"\x2f" + struct.pack("<I", (16384 - 1) | ((16384 - 1) << 14)) + b"\x00" * 8
bombs["bomb_16384x16384.webp"] = b"RIFF" + struct.pack("<I", 4 + 8 + len(vp8l)) + b"WEBP" + b"VP8L" + struct.pack("<I", len(vp8l)) + vp8l
for name, data in bombs.items():
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)
    manifest["bombs"].append(name)


# PNG kinds Pillow does not write, written here byte by byte (filter 0 on every row), decoded by
# Pillow as the oracle: Adam7-interlaced 8-bit RGB, and 16-bit RGB and grey (Pillow keeps a 16-bit RGB
# sample's high byte and clips 16-bit grey to 255). From pixels made above, so the earlier fixtures
# keep their random draws.
ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))


def write_png(file_name, samples, bit_depth, colour_type, interlaced=False):
    """samples: [height, width, channels] unsigned ints of bit_depth bits."""
    height, width = samples.shape[:2]
    dtype = ">u2" if bit_depth == 16 else "u1"
    passes = ADAM7 if interlaced else ((0, 0, 1, 1),)
    raw = b""
    for x0, y0, dx, dy in passes:
        sub = samples[y0::dy, x0::dx]
        if sub.size == 0:
            continue
        for row in sub:
            raw += b"\0" + row.astype(dtype).tobytes()
    header = struct.pack(">IIBBBBB", width, height, bit_depth, colour_type, 0, 0, 1 if interlaced else 0)
    with open(os.path.join(OUT, file_name), "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", header) + png_chunk(b"IDAT", zlib.compress(raw, 9))
                + png_chunk(b"IEND", b""))
    return add_decode(file_name)


write_png("interlaced_rgb_37x53.png", rgb, 8, 2, interlaced=True)
low_bytes = (np.arange(rgb.size).reshape(rgb.shape) * 37 % 256).astype(np.uint16)
wide = rgb.astype(np.uint16) * 256 + low_bytes
write_png("rgb16_37x53.png", wide, 16, 2)
write_png("gray16_interlaced_37x53.png", wide[:, :, 1], 16, 0, interlaced=True)

with open(os.path.join(OUT, "manifest.json"), "w") as f:
    json.dump(manifest, f, indent=1)
    f.write("\n")
