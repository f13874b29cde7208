#!/usr/bin/env ruby
# frozen_string_literal: true

# Renders one template of a BOSH job the way the director does, without a director.
#
#   ruby errand/test/render.rb JOB_DIR TEMPLATE PROPERTIES.yml [OUTPUT [LINKS.yml]]
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
# BOSH; `p` raises for a property that has neither a value nor a default. LINKS.yml gives
# the links the job consumes, each as a director hands it to the templates (`instances`
# with `address`, `properties`), for `link(name)` and `if_link(name)`. ERB runs with trim
# mode `-`, as in BOSH.
#
# Exit codes: 0 rendered; 1 the template failed (its error on stderr, with the template's
# line); 2 bad usage or an unreadable job, template or properties file.

require 'erb'
require 'yaml'
# The director's template semantics (p, if_p, properties, spec), shared with the
# process-backed IaaS, which renders templates the same way.
require_relative '../../crates/fleet-render/src/render'

module Render
  class UsageError < StandardError; end

  # Dotted names of the leaves of `hash` (a hash value is descended into).
  def self.leaves(hash, prefix = nil)
    hash.flat_map do |key, value|
      name = prefix ? "#{prefix}.#{key}" : key.to_s
      value.is_a?(Hash) && !value.empty? ? leaves(value, name) : [name]
    end
  end

  # Names in the properties file that no declared property covers.
  def self.undeclared(declared, given)
    leaves(given).reject do |leaf|
      declared.keys.any? { |name| leaf == name || leaf.start_with?("#{name}.") || name.start_with?("#{leaf}.") }
    end
  end

  # A placeholder instance: the errand's templates read only its name and index.
  def self.placeholder_spec(job_name)
    {
      'name' => job_name, 'index' => 0, 'id' => '00000000-0000-0000-0000-000000000000',
      'az' => 'z1', 'deployment' => 'render-test', 'address' => '10.0.0.10', 'ip' => '10.0.0.10',
      'networks' => {}, 'bootstrap' => true
    }
  end

  def self.load_yaml(path, what)
    YAML.safe_load(File.read(path), aliases: true)
  rescue Errno::ENOENT, Errno::EACCES, Errno::EISDIR => e
    raise UsageError, "cannot read the #{what} #{path}: #{e.message}"
  rescue Psych::SyntaxError => e
    raise UsageError, "the #{what} #{path} is not YAML: #{e.message}"
  end

  def self.main(argv)
    unless (3..5).cover?(argv.length)
      raise UsageError, 'usage: ruby render.rb JOB_DIR TEMPLATE PROPERTIES.yml [OUTPUT [LINKS.yml]]'
    end

    job_dir, template, properties_file, output, links_file = argv
    links = links_file ? load_yaml(links_file, 'links file') || {} : {}
    raise UsageError, "#{links_file} must hold a map of links" unless links.is_a?(Hash)
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
    merged = FleetRender.merge(declared, given)
    context = FleetRender::Context.new(job['name'], merged, placeholder_spec(job['name']), links)
    rendered = erb.result(context.evaluation_binding)

    if output && output != '-'
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
