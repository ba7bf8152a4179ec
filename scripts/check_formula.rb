# Checks the Homebrew formula scripts/release.sh renders, with a stand-in for Homebrew's Formula DSL
# (brew itself cannot be installed here). For each platform the formula serves, it checks that the url
# names an archive of the release whose SHA-256 is the one given, then unpacks that archive and runs the
# formula's `install` against it (every file it installs must be there); on this machine's platform it
# also runs the formula's `test` block on the installed binary.
#
#   ruby scripts/check_formula.rb DIST/almanac.rb DIST
require "digest"
require "fileutils"
require "pathname"
require "tmpdir"

formula_file, dist = ARGV
abort "usage: check_formula.rb FORMULA DIST" unless formula_file && dist

HOMEBREW_PREFIX = Pathname.new("/opt/homebrew")

# A directory the formula installs into; `install` fails unless each source exists in the unpacked
# archive, the way Homebrew's does.
class InstallDir < Pathname
  def install(*sources)
    sources.flatten.each do |s|
      pairs = s.is_a?(Hash) ? s.to_a : [[s, File.basename(s)]]
      pairs.each do |src, name|
        raise "install: #{src} is not in the archive" unless File.file?(src)
        FileUtils.mkdir_p(self)
        FileUtils.cp(src, join(name), preserve: true)
      end
    end
    raise "install: nothing to install (an empty glob?)" if sources.flatten.empty?
  end
end

class Formula
  class << self
    attr_accessor :os, :cpu, :facts

    # The formula's class is a subclass: what it says is kept on Formula itself.
    %i[desc homepage version license].each { |k| define_method(k) { |v| Formula.facts[k] = v } }
    def url(v) = Formula.facts[:urls] << v
    def sha256(v) = Formula.facts[:sha256s] << v
    def on_macos = (yield if Formula.os == :macos)
    def on_linux = (yield if Formula.os == :linux)
    def on_arm = (yield if Formula.cpu == :arm)
    def on_intel = (yield if Formula.cpu == :intel)
    def test(&block) = Formula.facts[:test] = block
  end

  def initialize(prefix) = @prefix = Pathname.new(prefix)
  def version = Formula.facts[:version]
  def bin = InstallDir.new(@prefix / "bin")
  def man1 = InstallDir.new(@prefix / "share/man/man1")
  def bash_completion = InstallDir.new(@prefix / "etc/bash_completion.d")
  def zsh_completion = InstallDir.new(@prefix / "share/zsh/site-functions")
  def fish_completion = InstallDir.new(@prefix / "share/fish/vendor_completions.d")

  def shell_output(cmd)
    out = `#{cmd}`
    raise "#{cmd} exited #{$?.exitstatus}" unless $?.success?
    out
  end

  def system(*cmd)
    Kernel.system(*cmd.map(&:to_s), out: File::NULL) or raise "#{cmd.join(' ')} failed"
  end

  def assert_match(want, got)
    raise "#{got.inspect} does not match #{want.inspect}" unless got.match?(want)
  end
end

sums = File.readlines(File.join(dist, "SHA256SUMS")).to_h { |l| l.split.reverse }
source = File.read(formula_file)
host = RUBY_PLATFORM.start_with?("x86_64-linux") ? %i[linux intel] : nil
failures = []
[%i[macos arm], %i[macos intel], %i[linux arm], %i[linux intel]].each do |os, cpu|
  Object.send(:remove_const, :Almanac) if Object.const_defined?(:Almanac)
  Formula.os, Formula.cpu = os, cpu
  Formula.facts = { urls: [], sha256s: [] }
  eval(source, TOPLEVEL_BINDING, formula_file)
  f = Formula.facts
  where = "#{os}/#{cpu}"
  unless f[:urls].size == 1 && f[:sha256s].size == 1
    failures << "#{where}: #{f[:urls].size} urls and #{f[:sha256s].size} checksums, not one each"
    next
  end
  archive = File.basename(f[:urls][0])
  failures << "#{where}: version #{f[:version].inspect} is not in the url #{f[:urls][0]}" unless f[:urls][0].include?("v#{f[:version]}/") || ENV["ALMANAC_FORMULA_BASE_SET"]
  path = File.join(dist, archive)
  unless File.file?(path)
    failures << "#{where}: #{archive} is not in #{dist}"
    next
  end
  actual = Digest::SHA256.file(path).hexdigest
  failures << "#{where}: sha256 #{f[:sha256s][0]} is not #{archive}'s (#{actual})" unless f[:sha256s][0] == actual
  failures << "#{where}: SHA256SUMS says #{sums[archive]} for #{archive}" unless sums[archive] == actual
  Dir.mktmpdir do |tmp|
    Kernel.system("tar", "-xzf", path, "-C", tmp) or raise "cannot unpack #{archive}"
    top = Dir.children(tmp)
    unless top.size == 1
      failures << "#{where}: #{archive} has #{top.size} top-level entries; Homebrew enters the only one"
      next
    end
    prefix = File.join(tmp, "prefix")
    formula = Almanac.new(prefix)
    begin
      Dir.chdir(File.join(tmp, top[0])) { formula.install }
      formula.caveats
      formula.instance_eval(&f[:test]) if [os, cpu] == host
    rescue => e
      failures << "#{where}: #{e.message}"
      next
    end
    installed = Dir.glob("**/*", base: prefix).select { |p| File.file?(File.join(prefix, p)) }.sort
    puts "check_formula: #{where}: #{archive} (#{actual[0, 12]}…) installs #{installed.size} files#{[os, cpu] == host ? ', test passed' : ''}"
  end
end
if failures.any?
  failures.each { |m| warn "check_formula: #{m}" }
  exit 1
end
