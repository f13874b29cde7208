# frozen_string_literal: true

# Renders the ERB templates of every job of one instance, as the BOSH director does.
# Reads one JSON document on stdin:
#   {"spec": {...instance spec...},
#    "jobs": [{"name": JOB, "declared": {PROPERTY: {"default": ...}},
#              "properties": {...as the manifest gives them...},
#              "links": {LINK: {...its content...}},
#              "templates": {SOURCE: TEXT}}]}
# and writes {"rendered": {JOB: {SOURCE: TEXT}}} or, when any template fails,
# {"errors": ["JOB/SOURCE: MESSAGE", ...]} with every failure of the instance.
#
# In a template: p(name), p(name, default), p([names]), if_p(*names) { } with .else and
# .else_if_p, properties (member access), spec (address, ip, id, index, name, az,
# deployment, networks, bootstrap, job), name and index; link(name) with instances (name,
# id, index, az, address, bootstrap), properties, p, if_p and address, and if_link(name)
# { |l| } with .else and .else_if_link. Declared properties take the manifest's value or
# else their default; undeclared ones are dropped. ERB trim mode `-`.

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

  # p(name), p(name, default) and p([names]) over `hash`.
  def self.fetch(hash, args)
    names = Array(args[0])
    names.each do |name|
      value = lookup(hash, name)
      return value unless value.nil?
    end
    return args[1] if args.length == 2

    raise UnknownProperty, names
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

  # What if_p and if_link return: when their block did not run, the next branch does.
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

    def else_if_link(name, &block)
      @context.if_link(name, &block)
    end
  end

  class InactiveElse
    def else; end

    def else_if_p(*_names)
      self
    end

    def else_if_link(_name)
      self
    end
  end

  class UnknownLink < StandardError
    def initialize(name)
      super("Can't find link '#{name}'")
    end
  end

  # p and if_p over an object's own properties (a job's, a link's, a link instance's):
  # if_p's block runs when every name has a value, else its else-block.
  module Properties
    def p(*args)
      FleetRender.fetch(own_properties, args)
    end

    def if_p(*names)
      values = names.map do |name|
        value = FleetRender.lookup(own_properties, name)
        return ActiveElse.new(self) if value.nil?

        value
      end
      yield(*values)
      InactiveElse.new
    end
  end

  class LinkInstance
    include Properties
    attr_reader :name, :index, :id, :az, :address, :bootstrap

    def initialize(hash)
      @name = hash['name']
      @index = hash['index']
      @id = hash['id']
      @az = hash['az']
      @address = hash['address']
      @bootstrap = hash['bootstrap']
      @properties = hash['properties'] || {}
    end

    def own_properties
      @properties
    end
  end

  class Link
    include Properties
    attr_reader :instances, :properties

    def initialize(hash)
      @hash = hash
      @instances = (hash['instances'] || []).map { |instance| LinkInstance.new(instance) }
      @properties = hash['properties'] || {}
    end

    def own_properties
      @properties
    end

    STATUS = { 'healthy' => 3, 'unhealthy' => 1, 'all' => 4, 'default' => 0 }.freeze

    # The provider's DNS query name, its first label the criteria as BOSH's DNS encoder
    # sorts them (`azs:` as `a<id>`, `status:` as `s<code>`); a manual link's address as
    # given.
    def address(criteria = {})
      address = @hash['address']
      ids = @hash['az_ids']
      return address unless ids && address.to_s.start_with?('q-')

      criteria = criteria.to_h { |key, value| [key.to_s, value] }
      octets = Array(criteria['azs']).filter_map { |az| ids[az.to_s] && "a#{ids[az.to_s]}" }
      status = criteria['status'].to_s
      raise ArgumentError, "unknown status '#{status}'" unless status.empty? || STATUS.key?(status)

      octets << "s#{STATUS.fetch(status, 0)}"
      address.sub(/\Aq-[^.]*/, "q-#{octets.sort.join}")
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
    include Properties
    attr_reader :raw_properties, :properties, :spec, :name, :index

    def initialize(job, merged, spec, links = {}, release = nil)
      @links = links
      @raw_properties = merged
      @properties = View.wrap(merged)
      @name = spec['name']
      @index = spec['index']
      own = { 'job' => { 'name' => job }, 'properties' => merged }
      own['release'] = release if release
      @spec = View.wrap(spec.merge(own))
    end

    def own_properties
      @raw_properties
    end

    def link(name)
      found = @links[name]
      raise UnknownLink, name unless found.is_a?(Hash) && found.key?('instances')

      Link.new(found)
    end

    def if_link(name)
      found = @links[name]
      return ActiveElse.new(self) unless found.is_a?(Hash) && found.key?('instances')

      yield Link.new(found)
      InactiveElse.new
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
          context = Context.new(name, merged, spec, job['links'] || {}, job['release'])
          rendered[name][source] = erb.result(context.evaluation_binding)
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
