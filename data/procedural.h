// data/procedural.h: class-conditioned synthetic photographs for the default dataset
// (apps/make_dataset writes them as an ImageNet-layout folder of JPEGs).
//
// Class k is a combination of a shape and a texture:
//   shape   = k % 6        disc, square, triangle, cross, ring, ellipse
//   texture = (k / 6) % 4  solid, stripes, checker, dots
//   k >= 24 repeats the 24 combinations with a different texture scale band ((k / 24) % 3), so
//   any class count works but classes beyond 72 start to repeat (names stay unique).
// Everything else is nuisance, drawn per image: position, size, rotation, the two foreground
// colours, the background colour and its gradient, 3-10 clutter strokes (some in front of the
// object), per-pixel noise and a brightness/contrast jitter. Colours are drawn independently of
// the class, so a classifier on the mean colour is at chance, while a small CNN can learn the
// shapes and textures. An image is a pure function of (seed, label, sample id): the dataset is
// identical whatever thread draws it.
#pragma once
#include <cstdint>
#include <string>

#include "data/decode.h"

namespace tandem::data {

// Folder name of class k, e.g. "n0003_cross_solid": the numeric prefix keeps byte order = k order.
std::string procedural_class_name(int k);

// Draws the image of sample `sample_id` of class `label`, width x height pixels.
Image draw_procedural(int label, uint64_t seed, uint64_t sample_id, int width, int height);

}  // namespace tandem::data
