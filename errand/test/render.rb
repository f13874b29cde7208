#!/usr/bin/env ruby
# frozen_string_literal: true

# Renders one template of a BOSH job the way the director does, without a director.
#
#   ruby errand/test/render.rb JOB_DIR TEMPLATE PROPERTIES.yml [OUTPUT]
#
# JOB_DIR is a job folder (its `spec` and `templates/`); TEMPLATE names one of the spec's
# templates, by its source (`config.yml.erb`) or its destination (`config/config.yml`);
# PROPERTIES.yml holds the job's properties as a manifest writes them under the
# instance group's job (nested maps, e.g. `service_broker: {api_endpoint: ...}`). The
# result goes to OUTPUT, or to stdout.
#
# What is emulated: every property the spec declares takes the value from the file, or
# the spec's default when the file has none (or null); properties the spec does not
# declare are dropped, as the director drops them, with a warning on stderr. In the
# template, `p(name)`, `p(name, default)`, `p([names...])`, `if_p(*names) { |*values| }`
# with `.else { }` and `.else_if_p(...)`, `properties` (read-only member access), and a
# placeholder `spec` (name, index, id, az, deployment, address, bootstrap) behave as in
# BOSH; `p` raises for a property that has neither a value nor a default. Links are not
# emulated. ERB runs with trim mode `-`, as in BOSH.
#
# Exit codes: 0 rendered; 1 the template failed (its error on stderr, with the template's
# line); 2 bad usage or an unreadable job, template or properties file.

require 'erb'
require 'yaml'

module Render
  class UsageError < StandardError; end

  # What `p` raises for a property that is neither set nor defaulted; BOSH's wording.
  class UnknownProperty < StandardError
    def initialize(names)
      super("Can't find property '#{names.inspect}'")
    end
  end

  # The value at a dotted name in nested hashes, or nil.
  def self.lookup(hash, dotted)
    dotted.split('.').reduce(hash) do |node, key|
      return nil unless node.is_a?(Hash)

      node[key]
    end
  end

  def self.insert(hash, dotted, value)
    keys = dotted.split('.')
    parent = keys[0..-2].reduce(hash) { |node, key| node[key] ||= {} }
    parent[keys.last] = value
  end

  # Dotted names of the leaves of `hash` (a hash value is descended into).
  def self.leaves(hash, prefix = nil)
    hash.flat_map do |key, value|
      name = prefix ? "#{prefix}.#{key}" : key.to_s
      value.is_a?(Hash) && !value.empty? ? leaves(value, name) : [name]
    end
  end

  # The properties the template sees: each declared property from the manifest, else its
  # default, as nested hashes.
  def self.merge(declared, given)
    merged = {}
    declared.each do |name, definition|
      value = lookup(given, name)
      value = (definition || {})['default'] if value.nil?
      insert(merged, name, value)
    end
    merged
  end

  # Names in the properties file that no declared property covers.
  def self.undeclared(declared, given)
    leaves(given).reject do |leaf|
      declared.keys.any? { |name| leaf == name || leaf.start_with?("#{name}.") || name.start_with?("#{leaf}.") }
    end
  end

  # Returned by `if_p` when a property is missing: `.else` runs its block.
  class ActiveElse
    def initialize(context)
      @context = context
    end

    def else
      yield
    end

    def else_if_p(*names, &block)
      @context.if_p(*names, &block)
    end
  end

  # Returned by `if_p` when its block ran: `.else` does nothing.
  class InactiveElse
    def else; end

    def else_if_p(*_names)
      self
    end
  end

  # Read-only member access to a hash (`properties.service_broker.username`), as BOSH's
  # OpenStruct view of the properties gives; an unknown member is nil.
  class View
    def initialize(hash)
      @hash = hash.to_h { |key, value| [key.to_s, View.wrap(value)] }
    end

    def self.wrap(value)
      case value
      when Hash then View.new(value)
      when Array then value.map { |item| wrap(item) }
      else value
      end
    end

    def [](key)
      @hash[key.to_s]
    end

    def to_h
      @hash
    end

    def method_missing(name, *args)
      return super unless args.empty? && !name.to_s.end_with?('=')

      @hash[name.to_s]
    end

    def respond_to_missing?(name, include_private = false)
      @hash.key?(name.to_s) || super
    end
  end

  # The object a template is evaluated against.
  class Context
    attr_reader :raw_properties, :properties, :spec, :name, :index

    def initialize(job_name, merged)
      @raw_properties = merged
      @properties = View.wrap(merged)
      @name = job_name
      @index = 0
      @spec = View.wrap(
        'name' => job_name, 'index' => 0, 'id' => '00000000-0000-0000-0000-000000000000',
        'az' => 'z1', 'deployment' => 'render-test', 'address' => '10.0.0.10',
        'bootstrap' => true, 'properties' => merged
      )
    end

    def p(*args)
      names = Array(args[0])
      names.each do |name|
        value = Render.lookup(@raw_properties, name)
        return value unless value.nil?
      end
      return args[1] if args.length == 2

      raise UnknownProperty, names
    end

    def if_p(*names)
      values = names.map do |name|
        value = Render.lookup(@raw_properties, name)
        return ActiveElse.new(self) if value.nil?

        value
      end
      yield(*values)
      InactiveElse.new
    end

    def link(name)
      raise NotImplementedError, "render.rb does not emulate links (link '#{name}')"
    end

    def if_link(name)
      raise NotImplementedError, "render.rb does not emulate links (if_link '#{name}')"
    end

    def evaluation_binding
      binding
    end
  end

  def self.load_yaml(path, what)
    YAML.safe_load(File.read(path), aliases: true)
  rescue Errno::ENOENT, Errno::EACCES, Errno::EISDIR => e
    raise UsageError, "cannot read the #{what} #{path}: #{e.message}"
  rescue Psych::SyntaxError => e
    raise UsageError, "the #{what} #{path} is not YAML: #{e.message}"
  end

  def self.main(argv)
    unless [3, 4].include?(argv.length)
      raise UsageError, 'usage: ruby render.rb JOB_DIR TEMPLATE PROPERTIES.yml [OUTPUT]'
    end

    job_dir, template, properties_file, output = argv
    spec_file = File.join(job_dir, 'spec')
    job = load_yaml(spec_file, 'job spec')
    raise UsageError, "#{spec_file} is not a job spec (a map with `name`)" unless job.is_a?(Hash) && job['name']

    templates = job['templates'] || {}
    source, = templates.find { |src, dest| [src, dest].include?(template) }
    unless source
      known = templates.map { |src, dest| "#{src} (#{dest})" }.join(', ')
      raise UsageError, "#{spec_file} has no template #{template}; it has: #{known}"
    end

    given = load_yaml(properties_file, 'properties file') || {}
    raise UsageError, "#{properties_file} must hold a map of properties" unless given.is_a?(Hash)

    declared = job['properties'] || {}
    undeclared(declared, given).each do |leaf|
      warn "render.rb: warning: #{properties_file}: `#{leaf}` is not declared in #{spec_file}; BOSH ignores it"
    end

    template_file = File.join(job_dir, 'templates', source)
    text = begin
      File.read(template_file)
    rescue SystemCallError => e
      raise UsageError, "cannot read the template #{template_file}: #{e.message}"
    end
    erb = ERB.new(text, trim_mode: '-')
    erb.filename = template_file
    rendered = erb.result(Context.new(job['name'], merge(declared, given)).evaluation_binding)

    if output
      File.write(output, rendered)
    else
      $stdout.write(rendered)
    end
    0
  rescue UsageError => e
    warn "render.rb: #{e.message}"
    2
  rescue StandardError, ScriptError => e
    # The template's own failure: name the template line when the backtrace has it.
    line = e.backtrace&.find { |frame| template_file && frame.start_with?("#{template_file}:") }
    where = line ? line.split(':in ').first : template_file
    warn "render.rb: #{where}: #{e.class}: #{e.message}"
    1
  end
end

exit Render.main(ARGV) if $PROGRAM_NAME == __FILE__
