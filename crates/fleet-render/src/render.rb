# frozen_string_literal: true

# Renders the ERB templates of every job of one instance, as the BOSH director does.
# Reads one JSON document on stdin:
#   {"spec": {...instance spec...},
#    "jobs": [{"name": JOB, "declared": {PROPERTY: {"default": ...}},
#              "properties": {...as the manifest gives them...},
#              "templates": {SOURCE: TEXT}}]}
# and writes {"rendered": {JOB: {SOURCE: TEXT}}} or, when any template fails,
# {"errors": ["JOB/SOURCE: MESSAGE", ...]} with every failure of the instance.
#
# In a template: p(name), p(name, default), p([names]), if_p(*names) { } with .else and
# .else_if_p, properties (member access), spec (address, ip, id, index, name, az,
# deployment, networks, bootstrap, job), name and index. Declared properties take the
# manifest's value or else their default; undeclared ones are dropped. ERB trim mode `-`.

require 'erb'
require 'json'

module FleetRender
  class UnknownProperty < StandardError
    def initialize(names)
      super("Can't find property '#{names.inspect}'")
    end
  end

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

  def self.merge(declared, given)
    merged = {}
    declared.each do |name, definition|
      value = lookup(given, name)
      value = (definition || {})['default'] if value.nil?
      insert(merged, name, value)
    end
    merged
  end

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

  class InactiveElse
    def else; end

    def else_if_p(*_names)
      self
    end
  end

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

  class Context
    attr_reader :raw_properties, :properties, :spec, :name, :index

    def initialize(job, merged, spec)
      @raw_properties = merged
      @properties = View.wrap(merged)
      @name = spec['name']
      @index = spec['index']
      @spec = View.wrap(spec.merge('job' => { 'name' => job }, 'properties' => merged))
    end

    def p(*args)
      names = Array(args[0])
      names.each do |name|
        value = FleetRender.lookup(@raw_properties, name)
        return value unless value.nil?
      end
      return args[1] if args.length == 2

      raise UnknownProperty, names
    end

    def if_p(*names)
      values = names.map do |name|
        value = FleetRender.lookup(@raw_properties, name)
        return ActiveElse.new(self) if value.nil?

        value
      end
      yield(*values)
      InactiveElse.new
    end

    def link(name)
      raise NotImplementedError, "links are not supported (link '#{name}')"
    end

    def if_link(name)
      raise NotImplementedError, "links are not supported (if_link '#{name}')"
    end

    def evaluation_binding
      binding
    end
  end

  def self.main
    input = JSON.parse($stdin.read)
    spec = input.fetch('spec')
    rendered = {}
    errors = []
    input.fetch('jobs').each do |job|
      name = job.fetch('name')
      merged = merge(job['declared'] || {}, job['properties'] || {})
      rendered[name] = {}
      job.fetch('templates').each do |source, text|
        file = "#{name}/#{source}"
        begin
          erb = ERB.new(text, trim_mode: '-')
          erb.filename = file
          rendered[name][source] = erb.result(Context.new(name, merged, spec).evaluation_binding)
        rescue StandardError, ScriptError => e
          line = e.backtrace&.find { |frame| frame.start_with?("#{file}:") }
          where = line ? line.split(':in ').first : file
          errors << "#{where}: #{e.message}"
        end
      end
    end
    $stdout.write(JSON.generate(errors.empty? ? { 'rendered' => rendered } : { 'errors' => errors }))
  end
end

# Run as `ruby -e SCRIPT` by the renderer; other scripts may require it for its classes.
FleetRender.main if $PROGRAM_NAME == '-e'
