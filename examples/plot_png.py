"""Line plots as PNG files with nothing but the standard library (zlib), so
the examples draw their loss curves where matplotlib is not installed."""

import struct
import zlib

# A 3x5 bitmap font: digits, '.', '-', 'e' (tick labels) and the legend's letters.
_GLYPHS = {
    "0": "111101101101111", "1": "010110010010111", "2": "111001111100111",
    "3": "111001111001111", "4": "101101111001001", "5": "111100111001111",
    "6": "111100111101111", "7": "111001001001001", "8": "111101111101111",
    "9": "111101111001111", ".": "000000000000010", "-": "000000111000000",
    "e": "000111111100111", "t": "010111010010011", "r": "000110101100100",
    "a": "000011101101011", "i": "010000010010010", "n": "000110101101101",
    "v": "000101101101010", "l": "010010010010010", " ": "000000000000000",
}


class Canvas:
    def __init__(self, width, height):
        self.width, self.height = width, height
        self.pixels = bytearray([255] * (width * height * 3))

    def set(self, x, y, color):
        if 0 <= x < self.width and 0 <= y < self.height:
            i = (y * self.width + x) * 3
            self.pixels[i:i + 3] = bytes(color)

    def line(self, x0, y0, x1, y1, color, thick=1):
        steps = max(abs(x1 - x0), abs(y1 - y0), 1)
        for k in range(steps + 1):
            x = round(x0 + (x1 - x0) * k / steps)
            y = round(y0 + (y1 - y0) * k / steps)
            for dx in range(thick):
                for dy in range(thick):
                    self.set(x + dx, y + dy, color)

    def text(self, x, y, string, color=(0, 0, 0), scale=2):
        for ch in string:
            glyph = _GLYPHS.get(ch, _GLYPHS[" "])
            for row in range(5):
                for col in range(3):
                    if glyph[row * 3 + col] == "1":
                        for sx in range(scale):
                            for sy in range(scale):
                                self.set(x + col * scale + sx, y + row * scale + sy, color)
            x += 4 * scale

    def save(self, path):
        raw = b"".join(b"\x00" + bytes(self.pixels[y * self.width * 3:(y + 1) * self.width * 3])
                       for y in range(self.height))

        def chunk(kind, data):
            body = kind + data
            return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)
        with open(path, "wb") as f:
            f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) +
                    chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def write_plot(path, series, width=720, height=420):
    """Writes ``series`` ([(label, [[x, y], ...], (r, g, b)), ...]) as one
    plot with shared axes, tick labels and a legend, to the PNG ``path``."""
    points = [p for _, data, _ in series for p in data]
    if not points:
        raise ValueError("write_plot: no points to plot")
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x_lo, x_hi = min(xs), max(xs)
    y_lo, y_hi = min(ys), max(ys)
    if x_hi == x_lo:
        x_hi = x_lo + 1
    if y_hi == y_lo:
        y_hi = y_lo + 1
    left, right, top, bottom = 80, width - 20, 20, height - 40
    canvas = Canvas(width, height)

    def to_px(x, y):
        return (round(left + (x - x_lo) / (x_hi - x_lo) * (right - left)),
                round(bottom - (y - y_lo) / (y_hi - y_lo) * (bottom - top)))

    for k in range(5):
        y = y_lo + (y_hi - y_lo) * k / 4
        _, py = to_px(x_lo, y)
        canvas.line(left, py, right, py, (225, 225, 225))
        canvas.text(4, py - 5, f"{y:.2f}")
        x = x_lo + (x_hi - x_lo) * k / 4
        px, _ = to_px(x, y_lo)
        canvas.text(px - 8, bottom + 10, f"{round(x)}")
    canvas.line(left, top, left, bottom, (0, 0, 0))
    canvas.line(left, bottom, right, bottom, (0, 0, 0))
    for index, (label, data, color) in enumerate(series):
        pixels = [to_px(x, y) for x, y in data]
        for (x0, y0), (x1, y1) in zip(pixels, pixels[1:]):
            canvas.line(x0, y0, x1, y1, color, thick=2)
        if len(pixels) == 1:
            canvas.line(pixels[0][0], pixels[0][1], pixels[0][0], pixels[0][1], color, thick=3)
        canvas.line(right - 110, top + 12 + 18 * index, right - 85, top + 12 + 18 * index, color,
                    thick=3)
        canvas.text(right - 78, top + 7 + 18 * index, label)
    canvas.save(path)
