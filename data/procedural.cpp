// data/procedural.cpp: the rasteriser behind draw_procedural (point-in-shape tests per pixel).
#include "data/procedural.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/check.h"
#include "core/ops/common/rng.h"

namespace tandem::data {
namespace {

constexpr const char* kShapes[6] = {"disc", "square", "triangle", "cross", "ring", "ellipse"};
constexpr const char* kTextures[4] = {"solid", "stripes", "checker", "dots"};
constexpr double kSqrt3 = 1.7320508075688772;

// Per-image random stream; draw k is keyed by (image key, k) only.
struct Draws {
  uint64_t key;
  uint64_t n = 0;
  double u() { return rng::uniform_f64(key, n++); }
  double u(double lo, double hi) { return lo + (hi - lo) * u(); }
  int i(int lo, int hi) { return std::min(hi - 1, lo + static_cast<int>(u() * (hi - lo))); }  // [lo, hi)
};

struct Rgb {
  float r, g, b;
};
Rgb random_colour(Draws& d) { return {float(d.u(0, 255)), float(d.u(0, 255)), float(d.u(0, 255))}; }
// A random colour whose brightness is far from `other`'s (>= ~100 of 255 apart): the object must
// stand out from what it lies on, or the class is invisible at 64 px. Which side (darker or
// brighter) depends on `other`, so colour itself still says nothing about the class.
Rgb contrasting_colour(Draws& d, Rgb other) {
  double lum = (other.r + other.g + other.b) / 3.0;
  double lo = lum > 128 ? 0 : std::min(255.0, lum + 100), hi = lum > 128 ? std::max(0.0, lum - 100) : 255;
  return {float(d.u(lo, hi)), float(d.u(lo, hi)), float(d.u(lo, hi))};
}

// Shape membership in the object's frame, unit radius.
bool inside_shape(int shape, double u, double v) {
  switch (shape) {
    case 0: return u * u + v * v <= 1.0;
    case 1: return std::max(std::fabs(u), std::fabs(v)) <= 0.8;
    case 2: return v >= -0.5 && v <= 1.0 && std::fabs(u) <= (1.0 - v) / kSqrt3;  // equilateral, apex up
    case 3: return (std::fabs(u) < 0.3 && std::fabs(v) < 0.95) || (std::fabs(v) < 0.3 && std::fabs(u) < 0.95);
    case 4: { double r2 = u * u + v * v; return r2 >= 0.55 * 0.55 && r2 <= 1.0; }
    default: return u * u + v * v / 0.16 <= 1.0;  // ellipse, 1 : 0.4
  }
}

// Which of the two foreground colours a point of the object takes (false = first).
bool texture_second(int texture, double u, double v, double freq) {
  switch (texture) {
    case 0: return false;
    case 1: return static_cast<int64_t>(std::floor(u * freq)) & 1;
    case 2: return (static_cast<int64_t>(std::floor(u * freq)) + static_cast<int64_t>(std::floor(v * freq))) & 1;
    default: {
      double fu = u * freq - std::floor(u * freq) - 0.5, fv = v * freq - std::floor(v * freq) - 0.5;
      return fu * fu + fv * fv < 0.09;  // dots of radius 0.3 cells
    }
  }
}

void set_pixel(std::vector<float>& px, int w, int h, int x, int y, Rgb c) {
  if (x < 0 || y < 0 || x >= w || y >= h) return;
  float* p = px.data() + (static_cast<size_t>(y) * w + x) * 3;
  p[0] = c.r; p[1] = c.g; p[2] = c.b;
}

// A clutter stroke: a thick line segment in a random colour.
void draw_stroke(std::vector<float>& px, int w, int h, Draws& d) {
  double x0 = d.u(0, w), y0 = d.u(0, h), x1 = d.u(0, w), y1 = d.u(0, h);
  int thick = d.i(1, 4);
  Rgb c = random_colour(d);
  int steps = static_cast<int>(std::hypot(x1 - x0, y1 - y0)) + 1;
  for (int s = 0; s <= steps; ++s) {
    double t = static_cast<double>(s) / steps;
    int cx = static_cast<int>(x0 + t * (x1 - x0)), cy = static_cast<int>(y0 + t * (y1 - y0));
    for (int dy = 0; dy < thick; ++dy)
      for (int dx = 0; dx < thick; ++dx) set_pixel(px, w, h, cx + dx, cy + dy, c);
  }
}

}  // namespace

std::string procedural_class_name(int k) {
  TANDEM_CHECK(k >= 0 && k < 10000, "procedural class index ", k, " out of range [0, 10000)");
  char buf[64];
  std::snprintf(buf, sizeof buf, "n%04d_%s_%s", k, kShapes[k % 6], kTextures[(k / 6) % 4]);
  std::string name = buf;
  if (k >= 24) name += "_s" + std::to_string((k / 24) % 3);
  return name;
}

Image draw_procedural(int label, uint64_t seed, uint64_t sample_id, int width, int height) {
  TANDEM_CHECK(width >= 8 && height >= 8, "procedural images must be at least 8x8, got ", width, "x", height);
  const int shape = label % 6, texture = (label / 6) % 4, band = (label / 24) % 3;
  Draws d{rng::mix64(rng::mix64(rng::mix64(seed) + static_cast<uint64_t>(label)) + sample_id)};

  // Background: a colour with a linear gradient in a random direction.
  std::vector<float> px(static_cast<size_t>(width) * height * 3);
  Rgb bg = random_colour(d), bg2 = random_colour(d);
  double ga = d.u(0, 2 * M_PI), gs = d.u(0.0, 0.6);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x) {
      double t = gs * (std::cos(ga) * x / width + std::sin(ga) * y / height);
      set_pixel(px, width, height, x, y,
                {float(bg.r + t * (bg2.r - bg.r)), float(bg.g + t * (bg2.g - bg.g)), float(bg.b + t * (bg2.b - bg.b))});
    }
  // Clutter is light on purpose: the default set must be learnable by a small ResNet in a few CPU
  // minutes (the README's main job), while colour and position still carry no class information.
  const int clutter = d.i(0, 5), in_front = d.i(0, 2);
  for (int c = 0; c < clutter - in_front; ++c) draw_stroke(px, width, height, d);

  // The object: random centre, radius, rotation; texture frequency from the class's scale band.
  const double m = std::min(width, height);
  const double radius = d.u(0.28, 0.45) * m;
  const double cx = d.u(radius * 0.6, width - radius * 0.6), cy = d.u(radius * 0.6, height - radius * 0.6);
  const double angle = d.u(0, 2 * M_PI), ca = std::cos(angle), sa = std::sin(angle);
  const double freq = d.u(2.0, 3.5) * (1.0 + 0.6 * band);  // cells per unit radius
  Rgb fg1 = contrasting_colour(d, bg);
  Rgb fg2 = contrasting_colour(d, fg1);  // stripes/checks must be visible too
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x) {
      double dx = (x + 0.5 - cx) / radius, dy = (y + 0.5 - cy) / radius;
      double u = ca * dx + sa * dy, v = -sa * dx + ca * dy;
      if (inside_shape(shape, u, v)) set_pixel(px, width, height, x, y, texture_second(texture, u, v, freq) ? fg2 : fg1);
    }
  for (int c = 0; c < in_front; ++c) draw_stroke(px, width, height, d);

  // Photometric nuisance: contrast and brightness jitter, then per-pixel noise.
  const double contrast = d.u(0.7, 1.2), brightness = d.u(-30, 30), noise = d.u(0, 18);
  Image img = Image::blank(width, height);
  for (size_t k = 0; k < px.size(); ++k) {
    double v = (px[k] - 128.0) * contrast + 128.0 + brightness + noise * (2.0 * d.u() - 1.0);
    img.pixels[k] = static_cast<uint8_t>(std::lround(std::clamp(v, 0.0, 255.0)));
  }
  return img;
}

}  // namespace tandem::data
