// Block partitions: default cuts, Pipe-BD's boundary shapes, blocks run alone and stitched back, shape
// mismatches between blocks, and students with the teacher blocks' shapes.
#include <gtest/gtest.h>

#include "models/blocks.h"
#include "models/registry.h"
#include "runtime/base/error.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"
#include "tests/testing.h"

namespace tandem {
namespace models {
namespace {

using tandem::testing::fresh_seed;

std::shared_ptr<Network> tiny(const std::string& spec) {
  auto s = parse_model_spec(spec);
  return make_model(s.first, s.second);
}

TEST(Blocks, DefaultPartitions) {
  auto r = tiny("resnet18:width=4,classes=10");
  auto blocks = r->blocks();
  ASSERT_EQ(blocks.size(), 4u);
  EXPECT_EQ(block_label(blocks, 0), "block 0 (conv1 .. layer1)");
  EXPECT_EQ(block_label(blocks, 1), "block 1 (layer2)");
  EXPECT_EQ(block_label(blocks, 3), "block 3 (layer4 .. fc)");
  auto m = tiny("mobilenet_v2:cifar,width_mult=0.25,classes=10");
  auto mb = m->blocks();
  ASSERT_EQ(mb.size(), 6u);
  EXPECT_EQ(block_label(mb, 0), "block 0 (features.0 .. features.3)");
  EXPECT_EQ(block_label(mb, 4), "block 4 (features.14 .. features.16)");
  EXPECT_EQ(block_label(mb, 5), "block 5 (features.17 .. classifier)");
  auto v = tiny("vgg16_bn:cifar,width=4,classes=10");
  EXPECT_EQ(v->blocks().size(), 5u);
  EXPECT_EQ(block_label(v->blocks(), 1), "block 1 (features.7 .. features.13)");
  // Block state dicts use the network's keys.
  auto sd = blocks[1]->state_dict();
  EXPECT_EQ(sd[0].first, "layer2.0.conv1.weight");
  size_t total = 0;
  for (const auto& b : blocks) total += b->state_dict().size();
  EXPECT_EQ(total, r->state_dict().size());
  // Custom cuts.
  EXPECT_EQ(r->blocks({0, 2}).size(), 2u);
  EXPECT_THROW(r->blocks({1, 2}), ValueError);
  EXPECT_THROW(r->blocks({0, 3, 3}), ValueError);
  EXPECT_THROW(r->blocks({0, 99}), ValueError);
}

TEST(Blocks, PipeBdBoundaryShapes) {
  // The relay shapes of Pipe-BD's MobileNetV2 teacher at batch 256 (its paper's table).
  ModelOptions o;
  o.cifar = true;
  o.num_classes = 10;
  auto cifar = make_model("mobilenet_v2", o);
  auto shapes = block_shapes(cifar->blocks(), {256, 3, 32, 32});
  std::vector<Shape> expected = {{256, 24, 32, 32}, {256, 32, 16, 16}, {256, 64, 8, 8},
                                 {256, 96, 8, 8},   {256, 160, 4, 4},  {256, 10}};
  ASSERT_EQ(shapes.size(), 6u);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(shapes[i].output, expected[i]) << i;
  EXPECT_EQ(shapes[3].input, expected[2]);
  auto imagenet = make_model("mobilenet_v2");
  shapes = block_shapes(imagenet->blocks(), {256, 3, 224, 224});
  expected = {{256, 24, 56, 56}, {256, 32, 28, 28}, {256, 64, 14, 14},
              {256, 96, 14, 14}, {256, 160, 7, 7},  {256, 1000}};
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(shapes[i].output, expected[i]) << i;
  ModelOptions narrow;
  narrow.width = 16;
  auto r = make_model("resnet50", narrow);
  shapes = block_shapes(r->blocks(), {8, 3, 224, 224});
  EXPECT_EQ(shapes[0].output, (Shape{8, 64, 56, 56}));
  EXPECT_EQ(shapes[2].output, (Shape{8, 256, 14, 14}));
  EXPECT_EQ(shapes[3].output, (Shape{8, 1000}));
}

TEST(Blocks, RunAloneAndStitchBack) {
  for (const char* spec : {"resnet18:cifar,width=4,classes=10", "mobilenet_v2:cifar,width_mult=0.25,classes=10",
                           "vgg16_bn:cifar,width=4,classes=10"}) {
    auto net = tiny(spec);
    net->eval();
    Shape in = {2, 3, 32, 32};
    Generator gen(fresh_seed());
    Tensor x = randn(in, gen);
    auto blocks = net->blocks();
    auto shapes = block_shapes(blocks, in);
    Tensor h = x;
    autograd::NoGradGuard ng;
    for (size_t i = 0; i < blocks.size(); ++i) {
      EXPECT_FALSE(blocks[i]->is_training());
      h = blocks[i]->forward(h);
      EXPECT_EQ(h.shape(), shapes[i].output) << spec << " block " << i;
    }
    tandem::testing::expect_bitwise_equal(h, net->forward(x), std::string(spec) + ": blocks in turn vs the network");
    auto stitched = stitch_blocks(blocks, in);
    auto a = stitched->state_dict(), b = net->state_dict();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].first, b[i].first);
    tandem::testing::expect_bitwise_equal(stitched->forward(x), h, std::string(spec) + ": stitched");
  }
}

TEST(Blocks, CuttingIntoBlocksKeepsEachModulesMode) {
  auto net = tiny("resnet18:cifar,width=4,classes=10");
  net->eval();
  net->at(0)->train(true);  // e.g. a stem kept in training mode on purpose
  auto blocks = net->blocks();
  EXPECT_TRUE(net->at(0)->is_training()) << "blocks() must not reset the modes of the modules it wraps";
  EXPECT_FALSE(net->at(1)->is_training());
  EXPECT_TRUE(blocks[0]->is_training());  // a block wrapper reports its first item's mode
  auto stitched = stitch_blocks(blocks, {2, 3, 32, 32});
  EXPECT_TRUE(net->at(0)->is_training());
  EXPECT_TRUE(stitched->is_training());
}

TEST(Students, RegistryBuildsTheSupernetStudentOfATeacher) {
  // "supernet=N" builds what blockwise distillation trains: the teacher's supernet student blocks, as items
  // block0, block1, ... (the key names tools:distill writes its stitched supernet student with).
  const char* teacher_spec = "mobilenet_v2:cifar,width_mult=0.25,classes=10,in_channels=1";
  auto teacher = tiny(teacher_spec);
  Shape in = {2, 1, 32, 32};
  StudentOptions so;
  so.kind = StudentKind::Supernet;
  so.supernet.cells = 1;
  so.seed = 7;
  auto blocks = make_student_blocks(*teacher, in, so);
  Sequential stitched;
  for (size_t b = 0; b < blocks.size(); ++b) stitched.add("block" + std::to_string(b), blocks[b]);

  auto spec = parse_model_spec(std::string(teacher_spec) + ",supernet=1,image=32,seed=7");
  auto student = make_model(spec.first, spec.second);
  ASSERT_EQ(student->blocks().size(), blocks.size());
  auto a = student->state_dict(), b = stitched.state_dict();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_EQ(a[i].second.shape(), b[i].second.shape()) << a[i].first;
  }
  auto shapes = block_shapes(student->blocks(), in), tshapes = block_shapes(teacher->blocks(), in);
  for (size_t i = 0; i < shapes.size(); ++i) EXPECT_EQ(shapes[i].output, tshapes[i].output) << "block " << i;
  student->load_state_dict(stitched.state_dict());  // the distilled weights load strictly
  EXPECT_THROW(parse_model_spec("resnet18:supernet=x"), ValueError);
}

TEST(Blocks, MismatchNamesTheBlocks) {
  auto r = tiny("resnet18:cifar,width=4,classes=10");
  auto b = r->blocks();
  try {
    block_shapes({b[0], b[2]}, {2, 3, 16, 16});
    ADD_FAILURE();
  } catch (const ShapeError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("block 2 (layer3) does not accept the output [2, 4, 16, 16] of block 0 (conv1 .. layer1)"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("expects 8 input channels"), std::string::npos) << m;
  }
  EXPECT_THROW(stitch_blocks({b[1], b[0]}, {2, 3, 16, 16}), ShapeError);
  try {
    block_shapes(b, {2, 1, 16, 16});
    ADD_FAILURE();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("block 0 (conv1 .. layer1) does not accept the input [2, 1, 16, 16]"),
              std::string::npos)
        << e.what();
  }
}

TEST(Students, MatchTeacherBlockShapes) {
  const std::pair<const char*, Shape> cases[] = {
      {"resnet18:cifar,width=4,classes=10", {2, 3, 16, 16}},
      {"resnet50:width=4,classes=10", {2, 3, 32, 32}},  // ImageNet stem: block 0 halves twice
      {"mobilenet_v2:cifar,width_mult=0.25,classes=10", {2, 3, 16, 16}},
      {"vgg16_bn:cifar,width=4,classes=10", {2, 3, 32, 32}},
  };
  for (const auto& c : cases) {
    auto teacher = tiny(c.first);
    auto tshapes = block_shapes(teacher->blocks(), c.second);
    for (StudentKind kind : {StudentKind::DepthwiseSeparable, StudentKind::Supernet}) {
      StudentOptions so;
      so.kind = kind;
      so.seed = fresh_seed();
      auto students = make_student_blocks(*teacher, c.second, so);
      ASSERT_EQ(students.size(), tshapes.size());
      Generator gen(fresh_seed());
      for (size_t i = 0; i < students.size(); ++i) {
        // Each student block runs alone on the teacher block's input and gives its output's shape.
        Tensor y = students[i]->forward(randn(tshapes[i].input, gen));
        EXPECT_EQ(y.shape(), tshapes[i].output) << c.first << " block " << i;
        sum(y).backward();
        if (kind == StudentKind::DepthwiseSeparable) {
          for (const auto& p : students[i]->named_parameters(ParamKind::Weight))
            EXPECT_TRUE(p.second.grad().defined()) << c.first << " " << p.first;
        }
      }
      // Students chain like the teacher's blocks.
      EXPECT_EQ(block_shapes(students, c.second).back().output, tshapes.back().output);
      if (kind == StudentKind::Supernet) {
        EXPECT_FALSE(students[0]->named_parameters(ParamKind::Architecture).empty()) << c.first;
      }
    }
  }
  // The Pipe-BD head student: cells to 320 channels, 1x1 conv to 1280, pool, classifier.
  ModelOptions o;
  o.cifar = true;
  o.num_classes = 10;
  auto mnv2 = make_model("mobilenet_v2", o);
  StudentOptions so;
  auto head = make_student_block(*mnv2, 5, {4, 3, 32, 32}, so);
  auto params = head->named_parameters();
  bool has_head_conv = false;
  for (const auto& p : params)
    if (p.first == "head.0.weight") {
      has_head_conv = true;
      EXPECT_EQ(p.second.shape(), (Shape{1280, 320, 1, 1}));
    }
  EXPECT_TRUE(has_head_conv);
  EXPECT_THROW(make_student_block(*mnv2, 6, {4, 3, 32, 32}, so), IndexError);
}

TEST(Students, SeparableStudentsAreDepthwiseSeparable) {
  auto teacher = tiny("resnet18:cifar,width=4,classes=10");
  StudentOptions so;
  so.kind = StudentKind::DepthwiseSeparable;
  auto s = make_student_block(*teacher, 1, {2, 3, 16, 16}, so);
  auto sd = s->state_dict();
  EXPECT_EQ(sd[0].first, "layer2.0.conv1.0.weight");
  EXPECT_EQ(sd[0].second.shape(), (Shape{4, 1, 3, 3}));  // depthwise, stride 2
  EXPECT_LT(s->num_parameters(), teacher->blocks()[1]->num_parameters());
}

TEST(Students, SupernetReplicasSampleAlike) {
  auto teacher = tiny("mobilenet_v2:cifar,width_mult=0.25,classes=10");
  StudentOptions so;
  so.seed = fresh_seed();
  auto a = make_student_block(*teacher, 1, {2, 3, 16, 16}, so);
  auto b = make_student_block(*teacher, 1, {2, 3, 16, 16}, so);
  Generator gen(fresh_seed());
  Tensor x = randn({2, 8, 16, 16}, gen);
  autograd::NoGradGuard ng;
  for (int i = 0; i < 5; ++i) tandem::testing::expect_bitwise_equal(a->forward(x), b->forward(x), "replicas");
}

}  // namespace
}  // namespace models
}  // namespace tandem
