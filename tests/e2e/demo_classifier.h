// The demo model's semantic check (issue 40), the rule of
// tools/demo_model/classify.py in C++: does an RGB picture show the
// background colour, and each object's colour and position, its caption
// says? The palette, anchors and thresholds come from heldout.json (written
// by make_data.py from grammar.py and classify.py), so both read one source.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "io/json.h"

namespace xdit::test {

struct DemoObject {
  std::string color, position;
};

struct DemoScene {
  std::string caption, background;
  std::vector<DemoObject> objects;
};

struct DemoVerdict {
  bool pass = false;
  std::string found;  // what was read off the picture, for failure messages
};

class DemoClassifier {
 public:
  // `heldout` is heldout.json parsed.
  explicit DemoClassifier(const nlohmann::json& heldout) {
    const auto& c = heldout.at("classifier");
    for (const auto& [name, rgb] : c.at("palette").items())
      palette_.push_back({name, {rgb[0].get<float>(), rgb[1].get<float>(), rgb[2].get<float>()}});
    for (const auto& [name, xy] : c.at("anchors").items())
      anchors_[name] = {xy[0].get<double>(), xy[1].get<double>()};
    border_ = c.at("border").get<double>();
    fg_distance_ = c.at("fg_distance").get<double>();
    min_pixels_ = c.at("min_pixels").get<double>();
    center_ = c.at("center").get<double>();
    for (const auto& s : heldout.at("captions")) {
      DemoScene scene{s.at("caption"), s.at("background"), {}};
      for (const auto& o : s.at("objects"))
        scene.objects.push_back({o.at("color"), o.at("position")});
      scenes_.push_back(scene);
    }
  }

  const std::vector<DemoScene>& scenes() const { return scenes_; }

  const std::string& nearest_color(const float* rgb) const {
    size_t best = 0;
    float best_d = INFINITY;
    for (size_t i = 0; i < palette_.size(); ++i) {
      float d = 0;
      for (int k = 0; k < 3; ++k)
        d += (rgb[k] - palette_[i].second[k]) * (rgb[k] - palette_[i].second[k]);
      if (d < best_d) best_d = d, best = i;
    }
    return palette_[best].first;
  }

  std::string region(double x, double y) const {
    const double dx = x - 0.5, dy = y - 0.5;
    if (std::max(std::abs(dx), std::abs(dy)) < center_) return "in the center";
    if (std::abs(dx) >= std::abs(dy)) return dx < 0 ? "on the left" : "on the right";
    return dy < 0 ? "at the top" : "at the bottom";
  }

  // `rgb` is height·width·3 bytes, row-major.
  DemoVerdict check(const std::vector<uint8_t>& rgb, int64_t height, int64_t width,
                    const DemoScene& want) const {
    auto px = [&](int64_t y, int64_t x, int k) {
      return static_cast<float>(rgb[static_cast<size_t>((y * width + x) * 3 + k)]);
    };
    // 1. The background: the most common nearest palette colour of the frame.
    const int64_t b =
        std::max<int64_t>(1, std::llround(border_ * static_cast<double>(std::min(height, width))));
    std::map<std::string, std::pair<int64_t, std::vector<double>>> frame;  // name → count, sum
    for (int64_t y = 0; y < height; ++y)
      for (int64_t x = 0; x < width; ++x) {
        if (y >= b && y < height - b && x >= b && x < width - b) continue;
        const float v[3] = {px(y, x, 0), px(y, x, 1), px(y, x, 2)};
        auto& e = frame[nearest_color(v)];
        if (e.second.empty()) e.second.assign(3, 0.0);
        e.first++;
        for (int k = 0; k < 3; ++k) e.second[static_cast<size_t>(k)] += v[k];
      }
    const auto bg = std::max_element(frame.begin(), frame.end(), [](const auto& l, const auto& r) {
      return l.second.first < r.second.first;
    });
    double bg_rgb[3];
    for (int k = 0; k < 3; ++k)
      bg_rgb[k] = bg->second.second[static_cast<size_t>(k)] / static_cast<double>(bg->second.first);
    // 2–3. Object pixels, each to the expected object with the nearest anchor.
    struct Acc {
      int64_t n = 0;
      double sx = 0, sy = 0, c[3] = {0, 0, 0};
    };
    std::vector<Acc> acc(want.objects.size());
    for (int64_t y = 0; y < height; ++y)
      for (int64_t x = 0; x < width; ++x) {
        double d = 0;
        for (int k = 0; k < 3; ++k) d += (px(y, x, k) - bg_rgb[k]) * (px(y, x, k) - bg_rgb[k]);
        if (std::sqrt(d) <= fg_distance_) continue;
        const double fx = (static_cast<double>(x) + 0.5) / static_cast<double>(width);
        const double fy = (static_cast<double>(y) + 0.5) / static_cast<double>(height);
        size_t owner = 0;
        double owner_d = INFINITY;
        for (size_t o = 0; o < want.objects.size(); ++o) {
          const auto& a = anchors_.at(want.objects[o].position);
          const double da = (fx - a.first) * (fx - a.first) + (fy - a.second) * (fy - a.second);
          if (da < owner_d) owner_d = da, owner = o;
        }
        Acc& e = acc[owner];
        e.n++, e.sx += fx, e.sy += fy;
        for (int k = 0; k < 3; ++k) e.c[k] += px(y, x, k);
      }
    // 4. Each object's colour (mean → nearest palette colour) and region.
    DemoVerdict v;
    v.pass = bg->first == want.background;
    v.found = "background " + bg->first;
    for (size_t o = 0; o < want.objects.size(); ++o) {
      const Acc& e = acc[o];
      if (static_cast<double>(e.n) < min_pixels_ * static_cast<double>(height * width)) {
        v.pass = false;
        v.found += "; object " + std::to_string(o + 1) + " missing";
        continue;
      }
      const double n = static_cast<double>(e.n);
      const float mean[3] = {static_cast<float>(e.c[0] / n), static_cast<float>(e.c[1] / n),
                             static_cast<float>(e.c[2] / n)};
      const std::string color = nearest_color(mean), position = region(e.sx / n, e.sy / n);
      v.pass = v.pass && color == want.objects[o].color && position == want.objects[o].position;
      v.found += "; " + color + " " + position;
    }
    return v;
  }

 private:
  std::vector<std::pair<std::string, std::vector<float>>> palette_;
  std::map<std::string, std::pair<double, double>> anchors_;
  double border_ = 0, fg_distance_ = 0, min_pixels_ = 0, center_ = 0;
  std::vector<DemoScene> scenes_;
};

}  // namespace xdit::test
