"""Drop-in compatibility with pydftracer 2.0.6 (over dftracer 2.2.0).

REFERENCE_NAMES and REFERENCE_SIGNATURES are the public surface of that
release, read from its installed source: every module, every public name,
and the parameters of its functions and methods.  The tests check that each
exists here, then use the API the way pydftracer's documentation and
examples do and check the trace files.  docs/compat.md lists the deliberate
differences; tests/test_compat_reference.py runs one program under both.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap

import pytest

from tracefile import find_traces, read_trace, run_python

# Subprocesses import the dftracer this interpreter imports (conftest.py).
ENABLED = {"DFTRACER_ENABLE": "1"}
PLAIN: dict = {}

REFERENCE_NAMES = {
    'dftracer': [
    ],
    'dftracer.dftracer': [
        'enter_event', 'exit_event', 'finalize', 'get_config', 'get_time', 'initialize',
        'log_event', 'log_metadata_event', 'mark_used', 'set_app_metadata_int',
        'set_app_metadata_string',
    ],
    'dftracer.python': [
        'AI', 'BLOCK_NAME', 'CTX_SEPARATOR', 'Checkpoint', 'CheckpointEvent', 'Communication',
        'CommunicationEvent', 'Compute', 'ComputeEvent', 'DFTRACER_ENABLE',
        'DFTRACER_ENABLE_ENV', 'DFTRACER_INIT_ENV', 'DFTRACER_INIT_PRELOAD',
        'DFTRACER_LOG_LEVEL', 'DFTRACER_LOG_LEVEL_ENV', 'DFTRACER_TIME_METRIC_ENV',
        'DFTracerAI', 'Data', 'DataEvent', 'DataLoader', 'DataLoaderEvent', 'Device',
        'DeviceEvent', 'Dynamo', 'EntityID', 'EntityRelation', 'EntityRole', 'EntityStore',
        'INIT_NAME', 'IOEvent', 'ITER_COUNT_NAME', 'ITER_NAME', 'NoOpProfiler', 'Other',
        'OtherEvent', 'P', 'Pipeline', 'PipelineEvent', 'ProfileCategory', 'ProfilerProtocol',
        'R', 'ROOT_CAT', 'ROOT_NAME', 'START_METADATA_NAME', 'STOP_METADATA_NAME', 'StringEnum',
        'TagDType', 'TagType', 'TagValue', 'TagValueTuple', 'ai', 'ai_common', 'ai_init',
        'capture_signal', 'checkpoint', 'comm', 'common', 'compute', 'create_backend', 'data',
        'dataloader', 'device', 'dft_fn', 'dft_fn_orig', 'dftracer', 'dftracer_orig', 'dynamo',
        'env', 'get_default_args', 'get_iter_block_name', 'get_iter_handle_name',
        'get_time_scale', 'logger', 'pipeline', 'profiler', 'setup_logger',
        'setup_stream_logger',
    ],
    'dftracer.python.env': [
        'DFTRACER_ENABLE', 'DFTRACER_ENABLE_ENV', 'DFTRACER_INIT_ENV', 'DFTRACER_INIT_PRELOAD',
        'DFTRACER_LOG_LEVEL', 'DFTRACER_LOG_LEVEL_ENV', 'DFTRACER_TIME_METRIC_ENV',
        'setup_stream_logger',
    ],
    'dftracer.python.common': [
        'DFTRACER_ENABLE', 'DFTRACER_ENABLE_ENV', 'DFTRACER_INIT_ENV', 'DFTRACER_INIT_PRELOAD',
        'DFTRACER_LOG_LEVEL', 'DFTRACER_LOG_LEVEL_ENV', 'DFTRACER_TIME_METRIC_ENV', 'EntityID',
        'EntityRelation', 'EntityRole', 'EntityStore', 'NoOpProfiler', 'P', 'ProfilerProtocol',
        'R', 'TagDType', 'TagType', 'TagValue', 'TagValueTuple', 'capture_signal', 'dft_fn',
        'dftracer', 'get_default_args', 'get_time_scale', 'profiler', 'setup_logger',
        'setup_stream_logger',
    ],
    'dftracer.python.logger': [
        'DFTRACER_ENABLE', 'DFTRACER_ENABLE_ENV', 'DFTRACER_INIT_ENV', 'DFTRACER_INIT_PRELOAD',
        'DFTRACER_LOG_LEVEL', 'DFTRACER_LOG_LEVEL_ENV', 'DFTRACER_TIME_METRIC_ENV', 'EntityID',
        'EntityRelation', 'EntityRole', 'EntityStore', 'NoOpProfiler', 'P', 'ProfilerProtocol',
        'R', 'TagDType', 'TagType', 'TagValue', 'TagValueTuple', 'capture_signal', 'common',
        'dft_fn', 'dftracer', 'get_default_args', 'get_time_scale', 'logger', 'profiler',
        'setup_logger', 'setup_stream_logger',
    ],
    'dftracer.python.ai': [
        'AI', 'BLOCK_NAME', 'CTX_SEPARATOR', 'Checkpoint', 'CheckpointEvent', 'Communication',
        'CommunicationEvent', 'Compute', 'ComputeEvent', 'DFTRACER_ENABLE',
        'DFTRACER_ENABLE_ENV', 'DFTRACER_INIT_ENV', 'DFTRACER_INIT_PRELOAD',
        'DFTRACER_LOG_LEVEL', 'DFTRACER_LOG_LEVEL_ENV', 'DFTRACER_TIME_METRIC_ENV',
        'DFTracerAI', 'Data', 'DataEvent', 'DataLoader', 'DataLoaderEvent', 'Device',
        'DeviceEvent', 'EntityID', 'EntityRelation', 'EntityRole', 'EntityStore', 'INIT_NAME',
        'IOEvent', 'ITER_COUNT_NAME', 'ITER_NAME', 'NoOpProfiler', 'Other', 'OtherEvent', 'P',
        'Pipeline', 'PipelineEvent', 'ProfileCategory', 'ProfilerProtocol', 'R', 'ROOT_CAT',
        'ROOT_NAME', 'START_METADATA_NAME', 'STOP_METADATA_NAME', 'StringEnum', 'TagDType',
        'TagType', 'TagValue', 'TagValueTuple', 'ai', 'ai_common', 'capture_signal',
        'checkpoint', 'comm', 'compute', 'data', 'dataloader', 'device', 'dft_fn',
        'dft_fn_orig', 'dftracer', 'dftracer_orig', 'get_default_args', 'get_iter_block_name',
        'get_iter_handle_name', 'get_time_scale', 'pipeline', 'profiler', 'setup_logger',
        'setup_stream_logger',
    ],
    'dftracer.python.ai_common': [
        'AI', 'BLOCK_NAME', 'CTX_SEPARATOR', 'Checkpoint', 'CheckpointEvent', 'Communication',
        'CommunicationEvent', 'Compute', 'ComputeEvent', 'DFTRACER_ENABLE',
        'DFTRACER_ENABLE_ENV', 'DFTRACER_INIT_ENV', 'DFTRACER_INIT_PRELOAD',
        'DFTRACER_LOG_LEVEL', 'DFTRACER_LOG_LEVEL_ENV', 'DFTRACER_TIME_METRIC_ENV',
        'DFTracerAI', 'Data', 'DataEvent', 'DataLoader', 'DataLoaderEvent', 'Device',
        'DeviceEvent', 'EntityID', 'EntityRelation', 'EntityRole', 'EntityStore', 'INIT_NAME',
        'IOEvent', 'ITER_COUNT_NAME', 'ITER_NAME', 'NoOpProfiler', 'Other', 'OtherEvent', 'P',
        'Pipeline', 'PipelineEvent', 'ProfileCategory', 'ProfilerProtocol', 'R', 'ROOT_CAT',
        'ROOT_NAME', 'START_METADATA_NAME', 'STOP_METADATA_NAME', 'StringEnum', 'TagDType',
        'TagType', 'TagValue', 'TagValueTuple', 'capture_signal', 'dft_fn', 'dftracer',
        'get_default_args', 'get_iter_block_name', 'get_iter_handle_name', 'get_time_scale',
        'profiler', 'setup_logger', 'setup_stream_logger',
    ],
    'dftracer.python.ai_init': [
        'AI', 'BLOCK_NAME', 'CTX_SEPARATOR', 'Checkpoint', 'CheckpointEvent', 'Communication',
        'CommunicationEvent', 'Compute', 'ComputeEvent', 'DFTRACER_ENABLE',
        'DFTRACER_ENABLE_ENV', 'DFTRACER_INIT_ENV', 'DFTRACER_INIT_PRELOAD',
        'DFTRACER_LOG_LEVEL', 'DFTRACER_LOG_LEVEL_ENV', 'DFTRACER_TIME_METRIC_ENV',
        'DFTracerAI', 'Data', 'DataEvent', 'DataLoader', 'DataLoaderEvent', 'Device',
        'DeviceEvent', 'EntityID', 'EntityRelation', 'EntityRole', 'EntityStore', 'INIT_NAME',
        'IOEvent', 'ITER_COUNT_NAME', 'ITER_NAME', 'NoOpProfiler', 'Other', 'OtherEvent', 'P',
        'Pipeline', 'PipelineEvent', 'ProfileCategory', 'ProfilerProtocol', 'R', 'ROOT_CAT',
        'ROOT_NAME', 'START_METADATA_NAME', 'STOP_METADATA_NAME', 'StringEnum', 'TagDType',
        'TagType', 'TagValue', 'TagValueTuple', 'ai', 'capture_signal', 'checkpoint', 'comm',
        'compute', 'data', 'dataloader', 'device', 'dft_fn', 'dftracer', 'get_default_args',
        'get_iter_block_name', 'get_iter_handle_name', 'get_time_scale', 'pipeline', 'profiler',
        'setup_logger', 'setup_stream_logger',
    ],
    'dftracer.python.dynamo': [
        'CAT_DYNAMO', 'CallStackRecord', 'DFTRACER_ENABLE', 'DFTracerAI', 'Dynamo', 'P', 'R',
        'TORCH_AVAILABLE', 'TagDType', 'TagType', 'TagValue', 'aot_autograd', 'create_backend',
        'create_detailed_op_name', 'dftracer', 'dynamo', 'make_boxed_func',
    ],
    'dftracer.python.torch': [
        'TagDType', 'TagType', 'TagValue', 'common', 'dftracer', 'get_time_scale', 'profiler',
        'trace_handler',
    ],
    'dftracer.python.torch.common': [
        'TagDType', 'TagType', 'TagValue', 'dftracer', 'get_time_scale', 'trace_handler',
    ],
    'dftracer.python.torch.profiler': [
        'TagDType', 'TagType', 'TagValue', 'common', 'dftracer', 'get_time_scale',
        'trace_handler',
    ],
    'dftracer.python.dbg': [
        'AI', 'BLOCK_NAME', 'CTX_SEPARATOR', 'Checkpoint', 'CheckpointEvent', 'Communication',
        'CommunicationEvent', 'Compute', 'ComputeEvent', 'DFTRACER_ENABLE',
        'DFTRACER_ENABLE_ENV', 'DFTRACER_INIT_ENV', 'DFTRACER_INIT_PRELOAD',
        'DFTRACER_LOG_LEVEL', 'DFTRACER_LOG_LEVEL_ENV', 'DFTRACER_TIME_METRIC_ENV',
        'DFTracerAI', 'Data', 'DataEvent', 'DataLoader', 'DataLoaderEvent', 'Device',
        'DeviceEvent', 'Dynamo', 'EntityID', 'EntityRelation', 'EntityRole', 'EntityStore',
        'INIT_NAME', 'IOEvent', 'ITER_COUNT_NAME', 'ITER_NAME', 'NoOpProfiler', 'Other',
        'OtherEvent', 'P', 'Pipeline', 'PipelineEvent', 'ProfileCategory', 'ProfilerProtocol',
        'R', 'ROOT_CAT', 'ROOT_NAME', 'START_METADATA_NAME', 'STOP_METADATA_NAME', 'StringEnum',
        'TagDType', 'TagType', 'TagValue', 'TagValueTuple', 'ai', 'ai_common', 'capture_signal',
        'checkpoint', 'comm', 'common', 'compute', 'create_backend', 'data', 'dataloader',
        'device', 'dft_fn', 'dft_fn_orig', 'dftracer', 'dftracer_orig', 'dynamo',
        'get_default_args', 'get_iter_block_name', 'get_iter_handle_name', 'get_time_scale',
        'logger', 'pipeline', 'profiler', 'setup_logger', 'setup_stream_logger',
    ],
    'dftracer.python.dbg.ai': [
        'AI', 'BLOCK_NAME', 'CTX_SEPARATOR', 'Checkpoint', 'CheckpointEvent', 'Communication',
        'CommunicationEvent', 'Compute', 'ComputeEvent', 'DFTRACER_ENABLE',
        'DFTRACER_ENABLE_ENV', 'DFTRACER_INIT_ENV', 'DFTRACER_INIT_PRELOAD',
        'DFTRACER_LOG_LEVEL', 'DFTRACER_LOG_LEVEL_ENV', 'DFTRACER_TIME_METRIC_ENV',
        'DFTracerAI', 'Data', 'DataEvent', 'DataLoader', 'DataLoaderEvent', 'Device',
        'DeviceEvent', 'EntityID', 'EntityRelation', 'EntityRole', 'EntityStore', 'INIT_NAME',
        'IOEvent', 'ITER_COUNT_NAME', 'ITER_NAME', 'NoOpProfiler', 'Other', 'OtherEvent', 'P',
        'Pipeline', 'PipelineEvent', 'ProfileCategory', 'ProfilerProtocol', 'R', 'ROOT_CAT',
        'ROOT_NAME', 'START_METADATA_NAME', 'STOP_METADATA_NAME', 'StringEnum', 'TagDType',
        'TagType', 'TagValue', 'TagValueTuple', 'ai', 'ai_common', 'capture_signal',
        'checkpoint', 'comm', 'compute', 'data', 'dataloader', 'device', 'dft_fn',
        'dft_fn_orig', 'dftracer', 'dftracer_orig', 'get_default_args', 'get_iter_block_name',
        'get_iter_handle_name', 'get_time_scale', 'pipeline', 'profiler', 'setup_logger',
        'setup_stream_logger',
    ],
    'dftracer.python.dbg.logger': [
        'DFTRACER_ENABLE', 'DFTRACER_ENABLE_ENV', 'DFTRACER_INIT_ENV', 'DFTRACER_INIT_PRELOAD',
        'DFTRACER_LOG_LEVEL', 'DFTRACER_LOG_LEVEL_ENV', 'DFTRACER_TIME_METRIC_ENV', 'EntityID',
        'EntityRelation', 'EntityRole', 'EntityStore', 'NoOpProfiler', 'P', 'ProfilerProtocol',
        'R', 'TagDType', 'TagType', 'TagValue', 'TagValueTuple', 'capture_signal', 'common',
        'dft_fn', 'dftracer', 'get_default_args', 'get_time_scale', 'logger', 'profiler',
        'setup_logger', 'setup_stream_logger',
    ],
    'dftracer.python.dbg.torch': [
        'TagDType', 'TagType', 'TagValue', 'common', 'dftracer', 'get_time_scale',
        'trace_handler',
    ],
    'dftracer.python.dbg.torch.profiler': [
        'TagDType', 'TagType', 'TagValue', 'common', 'dftracer', 'get_time_scale',
        'trace_handler',
    ],
}

# (module:object[.method]) -> parameters: name[=default repr][:kw|:*|:**]
REFERENCE_SIGNATURES = {
    'dftracer.dftracer:enter_event': [],
    'dftracer.dftracer:exit_event': [],
    'dftracer.dftracer:finalize': [],
    'dftracer.dftracer:get_config': ['key'],
    'dftracer.dftracer:get_time': [],
    'dftracer.dftracer:initialize': ['log_file=None', 'data_dirs=None', 'process_id=-1'],
    'dftracer.dftracer:log_event': ['name', 'cat', 'start_time', 'duration', 'int_args={}', 'string_args={}', 'float_args={}'],
    'dftracer.dftracer:log_metadata_event': ['key', 'value'],
    'dftracer.dftracer:mark_used': ['name'],
    'dftracer.dftracer:set_app_metadata_int': ['key', 'value'],
    'dftracer.dftracer:set_app_metadata_string': ['key', 'value'],
    'dftracer.python.ai_common:AI': ['epoch=None', 'step=None', 'image_idx=None', 'image_size=None', 'enable=True'],
    'dftracer.python.ai_common:Checkpoint': ['epoch=None', 'step=None', 'image_idx=None', 'image_size=None', 'enable=True'],
    'dftracer.python.ai_common:Communication': ['epoch=None', 'step=None', 'image_idx=None', 'image_size=None', 'enable=True'],
    'dftracer.python.ai_common:Compute': ['epoch=None', 'step=None', 'image_idx=None', 'image_size=None', 'enable=True'],
    'dftracer.python.ai_common:DFTracerAI': ['cat:kw', 'name=None:kw', 'epoch=None:kw', 'step=None:kw', 'image_idx=None:kw', 'image_size=None:kw', 'enable=True:kw'],
    'dftracer.python.ai_common:DFTracerAI.__call__': ['fn=None', 'enable=None:kw', 'epoch=None:kw', 'step=None:kw', 'image_idx=None:kw', 'image_size=None:kw', 'args=None:kw'],
    'dftracer.python.ai_common:DFTracerAI.create_children': ['names'],
    'dftracer.python.ai_common:DFTracerAI.derive': ['name'],
    'dftracer.python.ai_common:DFTracerAI.disable': [],
    'dftracer.python.ai_common:DFTracerAI.enable': [],
    'dftracer.python.ai_common:DFTracerAI.get_time': [],
    'dftracer.python.ai_common:DFTracerAI.init': ['fn=None', 'enable=None:kw', 'epoch=None:kw', 'step=None:kw', 'image_idx=None:kw', 'image_size=None:kw', 'args=None:kw'],
    'dftracer.python.ai_common:DFTracerAI.iter': ['iterator', 'include_block=True:kw', 'include_iter=True:kw', 'iter_name=None:kw', 'block_name=None:kw'],
    'dftracer.python.ai_common:DFTracerAI.reset': [],
    'dftracer.python.ai_common:DFTracerAI.start': ['metadata=False'],
    'dftracer.python.ai_common:DFTracerAI.stop': ['metadata=False'],
    'dftracer.python.ai_common:DFTracerAI.update': ['epoch=None', 'step=None', 'image_idx=None', 'image_size=None', 'args=None'],
    'dftracer.python.ai_common:Data': ['epoch=None', 'step=None', 'image_idx=None', 'image_size=None', 'enable=True'],
    'dftracer.python.ai_common:DataLoader': ['epoch=None', 'step=None', 'image_idx=None', 'image_size=None', 'enable=True'],
    'dftracer.python.ai_common:Device': ['epoch=None', 'step=None', 'image_idx=None', 'image_size=None', 'enable=True'],
    'dftracer.python.ai_common:IO': ['cat:kw', 'parent_name:kw', 'epoch=None:kw', 'step=None:kw', 'image_idx=None:kw', 'image_size=None:kw', 'enable=True:kw'],
    'dftracer.python.ai_common:Other': ['epoch=None', 'step=None', 'image_idx=None', 'image_size=None', 'enable=True'],
    'dftracer.python.ai_common:Pipeline': ['epoch=None', 'step=None', 'image_idx=None', 'image_size=None', 'enable=True'],
    'dftracer.python.ai_common:get_iter_block_name': ['name'],
    'dftracer.python.ai_common:get_iter_handle_name': ['name'],
    'dftracer.python.common:NoOpProfiler.declare_entity': ['type', 'key', 'store', 'uri'],
    'dftracer.python.common:NoOpProfiler.declare_entity_type': ['type', 'role', 'description'],
    'dftracer.python.common:NoOpProfiler.enter_event': [],
    'dftracer.python.common:NoOpProfiler.exit_event': [],
    'dftracer.python.common:NoOpProfiler.finalize': [],
    'dftracer.python.common:NoOpProfiler.get_config': ['key'],
    'dftracer.python.common:NoOpProfiler.get_time': [],
    'dftracer.python.common:NoOpProfiler.initialize': ['log_file=None', 'data_dirs=None', 'process_id=-1'],
    'dftracer.python.common:NoOpProfiler.log_event': ['name', 'cat', 'start_time', 'duration', 'int_args=None', 'string_args=None', 'float_args=None', 'relations=None'],
    'dftracer.python.common:NoOpProfiler.log_metadata_event': ['key', 'value'],
    'dftracer.python.common:NoOpProfiler.mark_used': ['name'],
    'dftracer.python.common:NoOpProfiler.relate_entities': ['relation', 'subject', 'object'],
    'dftracer.python.common:NoOpProfiler.set_app_metadata_int': ['key', 'value'],
    'dftracer.python.common:NoOpProfiler.set_app_metadata_string': ['key', 'value'],
    'dftracer.python.common:TagValue': ['value', 'dtype=<TagDType.STRING: 2>', 'tag_type=<TagType.KEY: 0>'],
    'dftracer.python.common:TagValue.value': [],
    'dftracer.python.common:capture_signal': ['signal_number', 'frame'],
    'dftracer.python.common:dft_fn': ['cat', 'name=None', 'epoch=None', 'step=None', 'image_idx=None', 'image_size=None', 'enable=True'],
    'dftracer.python.common:dft_fn.__enter__': [],
    'dftracer.python.common:dft_fn.__exit__': ['exc_type', 'exc_val', 'exc_tb'],
    'dftracer.python.common:dft_fn.flush': [],
    'dftracer.python.common:dft_fn.generates': ['type', 'key', 'store=<EntityStore.MEMORY: 0>', "uri=''"],
    'dftracer.python.common:dft_fn.iter': ['func', "name='loop'", "iter_name='step'"],
    'dftracer.python.common:dft_fn.log': ['func=None', 'name=None'],
    'dftracer.python.common:dft_fn.log_init': ['init=None', 'name=None'],
    'dftracer.python.common:dft_fn.log_metadata': ['key', 'value'],
    'dftracer.python.common:dft_fn.log_static': ['func=None', 'name=None'],
    'dftracer.python.common:dft_fn.relate': ['relation', 'entity'],
    'dftracer.python.common:dft_fn.relate_entity': ['relation', 'type', 'key', 'store=<EntityStore.MEMORY: 0>', "uri=''"],
    'dftracer.python.common:dft_fn.reset': [],
    'dftracer.python.common:dft_fn.update': ['epoch=None', 'step=None', 'image_idx=None', 'image_size=None', 'args=None'],
    'dftracer.python.common:dft_fn.uses': ['type', 'key', 'store=<EntityStore.MEMORY: 0>', "uri=''"],
    'dftracer.python.common:dftracer': [],
    'dftracer.python.common:dftracer.declare_entity': ['type', 'key', 'store=<EntityStore.MEMORY: 0>', "uri=''"],
    'dftracer.python.common:dftracer.declare_entity_type': ['type', 'role=<EntityRole.UNKNOWN: 0>', "description=''"],
    'dftracer.python.common:dftracer.enter_event': [],
    'dftracer.python.common:dftracer.exit_event': [],
    'dftracer.python.common:dftracer.finalize': [],
    'dftracer.python.common:dftracer.get_config': ['key'],
    'dftracer.python.common:dftracer.get_instance': [],
    'dftracer.python.common:dftracer.get_time': [],
    'dftracer.python.common:dftracer.initialize_log': ['logfile=None', 'data_dir=None', 'process_id=-1'],
    'dftracer.python.common:dftracer.log_event': ['name', 'cat', 'start_time', 'duration', 'int_args=None', 'float_args=None', 'string_args=None', 'relations=None'],
    'dftracer.python.common:dftracer.log_metadata_event': ['key', 'value'],
    'dftracer.python.common:dftracer.mark_used': ['name'],
    'dftracer.python.common:dftracer.relate_entities': ['relation', 'subject', 'object'],
    'dftracer.python.common:dftracer.set_app_metadata_int': ['key', 'value'],
    'dftracer.python.common:dftracer.set_app_metadata_string': ['key', 'value'],
    'dftracer.python.common:get_default_args': ['func'],
    'dftracer.python.common:get_time_scale': [],
    'dftracer.python.common:setup_logger': ['name', 'log_file', 'formatter', 'level=20'],
    'dftracer.python.dynamo:CallStackRecord': ['op_name', 'op_type', 'target', 'timestamp_us', 'grad_enabled'],
    'dftracer.python.dynamo:Dynamo': ['name=None', 'epoch=None', 'step=None', 'image_idx=None', 'image_size=None', 'enable=True'],
    'dftracer.python.dynamo:Dynamo.add_enhanced_timing_to_graph': ['gm'],
    'dftracer.python.dynamo:Dynamo.compile': ['f_py=None', 'autograd=True'],
    'dftracer.python.dynamo:Dynamo.count_parameters': ['module'],
    'dftracer.python.dynamo:Dynamo.reset': [],
    'dftracer.python.dynamo:create_backend': ['name=None', 'epoch=None', 'step=None', 'image_idx=None', 'image_size=None', 'enable=True', 'autograd=True'],
    'dftracer.python.dynamo:create_detailed_op_name': ['node', 'gm'],
    'dftracer.python.env:setup_stream_logger': [],
    'dftracer.python.torch.common:trace_handler': ['profiler_result'],
}

# Enum members of pydftracer 2.0.6: the StringEnums' values in order, the
# others' names and values.
REFERENCE_ENUMS = {
    "CheckpointEvent": ["capture", "restart"],
    "CommunicationEvent": ["send", "receive", "barrier", "bcast", "reduce", "all_reduce",
                           "gather", "all_gather", "scatter", "reduce_scatter", "all_to_all"],
    "ComputeEvent": ["forward", "backward", "step"],
    "DataEvent": ["preprocess", "item"],
    "DataLoaderEvent": ["fetch"],
    "DeviceEvent": ["transfer"],
    "IOEvent": ["open", "read", "write", "close"],
    "OtherEvent": ["log"],
    "PipelineEvent": ["epoch", "train", "evaluate", "test"],
    "ProfileCategory": ["compute", "data", "dataloader", "comm", "device", "checkpoint",
                        "pipeline", "other"],
    "TagType": {"KEY": 0, "VALUE": 1, "IGNORE": 2},
    "TagDType": {"INT": 0, "FLOAT": 1, "STRING": 2},
    "EntityStore": {"MEMORY": 0, "GPU_MEMORY": 1, "LOCAL_DISK": 2, "PARALLEL_FS": 3,
                    "BURST_BUFFER": 4, "OBJECT_STORE": 5, "DATABASE": 6, "NETWORK": 7,
                    "OTHER": 8},
    "EntityRole": {"UNKNOWN": 0, "INPUT": 1, "OUTPUT": 2, "INTERMEDIATE": 3, "PARAMETER": 4,
                   "REFERENCE": 5},
    "EntityRelation": {"USED": 0, "GENERATED": 1, "INVALIDATED": 2, "UPDATED": 3,
                       "DERIVED_FROM": 16, "REVISION_OF": 17, "CONTAINS": 18, "PART_OF": 19,
                       "SPECIALIZATION_OF": 20, "ALTERNATE_OF": 21, "DEPENDS_ON": 22},
}


# Parameters we accept beyond pydftracer's (all optional), by object.
EXTRA_PARAMETERS_OK = {"dftracer.python.dynamo:Dynamo.compile": {"compile_kwargs"}}

SURFACE_PROBE = """
import importlib, inspect, json, sys
names, sigs = json.loads(sys.argv[1]), json.loads(sys.argv[2])
missing = {}
for mod_name, wanted in names.items():
    mod = importlib.import_module(mod_name)
    missing[mod_name] = [n for n in wanted if not hasattr(mod, n)]

def params(o):
    try:
        sig = inspect.signature(o)
    except (TypeError, ValueError):
        return None
    out = {}
    for p in sig.parameters.values():
        if p.name == "self":
            continue
        out[p.name] = (None if p.default is inspect.Parameter.empty else repr(p.default),
                       p.kind.name)
    return out

ours = {}
for key in sigs:
    mod_name, path = key.split(":")
    obj = sys.modules.get(mod_name) or importlib.import_module(mod_name)
    parts = path.split(".")
    for part in parts:
        obj = getattr(obj, part, None)
        if obj is None:
            break
    if obj is None:
        ours[key] = "missing"
    elif inspect.isclass(obj):
        ours[key] = params(obj)
    else:
        ours[key] = params(obj)
print(json.dumps({"missing": missing, "ours": ours}))
"""


def _probe():
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-c", SURFACE_PROBE, json.dumps(REFERENCE_NAMES),
         json.dumps(REFERENCE_SIGNATURES)],
        env={**{k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}, **PLAIN},
        capture_output=True, text=True, timeout=300, check=True)
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def probe():
    return _probe()


@pytest.mark.parametrize("module", sorted(REFERENCE_NAMES))
def test_every_reference_name_exists(probe, module):
    assert probe["missing"][module] == [], f"{module} lacks {probe['missing'][module]}"


def _parse(spec):
    kind = ""
    for suffix in (":kw", ":*", ":**", ":pos"):
        if spec.endswith(suffix):
            spec, kind = spec[: -len(suffix)], suffix[1:]
    name, eq, default = spec.partition("=")
    return name, (default if eq else None), kind


def test_signatures_match_the_reference(probe):
    problems = []
    for key, ref in REFERENCE_SIGNATURES.items():
        ours = probe["ours"][key]
        if ours == "missing":
            problems.append(f"{key}: missing")
            continue
        if ours is None:  # a C function without a text signature: exercised below
            continue
        ref_names = set()
        for spec in ref:
            name, default, kind = _parse(spec)
            if kind in ("*", "**"):
                continue
            ref_names.add(name)
            if name not in ours:
                problems.append(f"{key}: no parameter {name}")
                continue
            our_default, our_kind = ours[name]
            if our_default != default:
                problems.append(f"{key}({name}): default {our_default} instead of {default}")
            if kind == "" and our_kind == "KEYWORD_ONLY":
                problems.append(f"{key}({name}): keyword-only, pydftracer takes it by position")
        for name, (default, kind) in ours.items():
            if name in ref_names or kind in ("VAR_POSITIONAL", "VAR_KEYWORD"):
                continue
            if default is None and name not in EXTRA_PARAMETERS_OK.get(key, ()):
                problems.append(f"{key}: extra required parameter {name}")
    assert problems == []


@pytest.mark.parametrize("enum_name", sorted(REFERENCE_ENUMS))
def test_enum_members_match_the_reference(enum_name):
    import dftracer.python as dp

    enum_cls = getattr(dp, enum_name)
    want = REFERENCE_ENUMS[enum_name]
    if isinstance(want, list):
        assert issubclass(enum_cls, dp.StringEnum)
        assert [m.value for m in enum_cls] == want
        assert all(m == m.value and str(m) == m.value for m in enum_cls)
    else:
        assert {m.name: m.value for m in enum_cls} == want
        assert all(int(m) == m.value for m in enum_cls)


def test_category_classes_take_values_and_enable():
    from dftracer.python import (AI, Checkpoint, Communication, Compute, Data, DataLoader,
                                 Device, Other, Pipeline, ProfileCategory)

    for cls, cat in ((Compute, "compute"), (Data, "data"), (DataLoader, "dataloader"),
                     (Communication, "comm"), (Device, "device"), (Checkpoint, "checkpoint"),
                     (Pipeline, "pipeline"), (Other, "other")):
        node = cls(epoch=1, step=2, image_idx=3, image_size=4.5, enable=False)
        assert (node.cat, node.name, node.enabled) == (cat, cat, False)
        assert node._values == {"epoch": 1, "step": 2, "image_idx": 3, "image_size": 4.5}
        assert cat in {c.value for c in ProfileCategory}
        for child in node._children.values():
            assert child.cat == cat and not child.enabled and child._values == node._values
    root = AI(step=9)
    assert (root.cat, root.name) == ("ai_root", "ai_root")
    assert root.pipeline.train._values["step"] == 9


# ---- running programs ------------------------------------------------------


def traced(tmp_path, code, env=None, stem="trace"):
    prelude = f"import os\nTRACE = os.path.join({str(tmp_path)!r}, {stem + '.pfw'!r})\n"
    proc = run_python(prelude + textwrap.dedent(code), {**ENABLED, **(env or {})})
    files = find_traces(str(tmp_path), stem)
    assert len(files) == 1, (files, proc.stderr)
    return read_trace(files[0]), proc


def own_args(ev):
    return {k: v for k, v in ev.get("args", {}).items() if k not in ("hhash", "level", "p_idx")}


def named(trace, name):
    return [e for e in trace.user_events() if e["name"] == name]


def test_readme_use_snippet_creates_the_log_directory(tmp_path):
    # pydftracer creates the directory of the log file; the README's own
    # snippet writes to traces/run.pfw in a fresh directory.
    code = """
        from dftracer.python import dftracer
        log = dftracer.initialize_log("traces/run.pfw", None, -1)
        t = log.get_time()
        log.log_event("load_batch", "data", t, log.get_time() - t, int_args={"step": 3})
        log.finalize()
    """
    run_python(code, ENABLED, cwd=str(tmp_path))
    files = find_traces(str(tmp_path / "traces"), "run")
    assert len(files) == 1
    ev = named(read_trace(files[0]), "load_batch")
    assert [(e["cat"], own_args(e)) for e in ev] == [("data", {"step": 3})]


def test_nested_missing_directories_are_created_and_bad_ones_still_raise(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code = f"""
        from dftracer.python import dftracer
        try:
            dftracer.initialize_log({str(blocker / 'sub' / 'x.pfw')!r})
        except OSError as e:
            print("OSError", e)
        log = dftracer.initialize_log({str(tmp_path / 'a' / 'b' / 'c' / 't.pfw')!r})
        print(log.active)
    """
    proc = run_python(code, ENABLED)
    first, second = proc.stdout.splitlines()
    assert first.startswith("OSError") and str(blocker) in first
    assert second == "True"
    assert len(find_traces(str(tmp_path / "a" / "b" / "c"), "t")) == 1


def test_disabled_initialize_log_creates_nothing(tmp_path):
    run_python(f"""
        from dftracer.python import dftracer
        log = dftracer.initialize_log({str(tmp_path / 'no' / 'x.pfw')!r})
        assert not log.active and log.get_config("DFTRACER_TIME_METRIC") == ""
    """, PLAIN, cwd=str(tmp_path))
    assert os.listdir(tmp_path) == []  # no directory, no trace, no dft.log


def test_decorators_as_documented(tmp_path):
    trace, _ = traced(tmp_path, """
        from dftracer.python import dftracer, dft_fn as Profile, dft_fn_orig, dftracer_orig
        assert dft_fn_orig is Profile and dftracer_orig is dftracer
        log = dftracer.initialize_log(TRACE, None, -1)
        dlp = Profile("IO")

        @dlp.log
        def read(path, epoch=1):
            return path

        class Reader:
            @dlp.log_init
            def __init__(self, image_idx=2):
                pass

        class Model:
            step = 4

            @Profile("COMPUTE").log
            def forward(self, x):
                return x

            @staticmethod
            @Profile("COMPUTE").log_static
            def helper():
                return 1

        read("a")
        Reader()
        Model().forward(1)
        Model.helper()
        for _ in dlp.iter(range(2)):
            pass
        with Profile("CTX", "block", step=5) as p:
            p.update(epoch=2, args={"k": "v", "f": 0.5})
        region = Profile("REGION", "region")
        region.flush()
        region.reset()
        region.log_metadata("key", "value")
        log.finalize()
    """)
    got = {(e["name"], e["cat"]): own_args(e) for e in trace.user_events()}
    assert got[("read", "IO")] == {"epoch": 1}
    assert got[("Reader.__init__", "IO")] == {"image_idx": 2}
    assert got[("Model.forward", "COMPUTE")] == {"step": 4}
    assert ("Model.helper", "COMPUTE") in got
    assert [own_args(e) for e in named(trace, "loop.iter")] == [{"step": 1}, {"step": 2}]
    assert len(named(trace, "loop.yield")) == 2
    assert got[("block", "CTX")] == {"step": 5, "epoch": 2, "k": "v", "f": 0.5}
    assert ("region", "REGION") in got
    cm = [e["args"] for e in trace.of("M") if e["name"] == "CM"]
    assert any(a["name"] == "key" and a["value"] == "value" for a in cm)


def test_ai_tree_classes_and_names(tmp_path):
    trace, proc = traced(tmp_path, """
        from dftracer.python import (AI, Compute, Data, DataLoader, Communication, Device,
            Checkpoint, Pipeline, Other, DFTracerAI, ProfileCategory, ComputeEvent, IOEvent,
            OtherEvent, StringEnum, ai, dftracer, get_iter_block_name, get_iter_handle_name,
            BLOCK_NAME, ITER_NAME, ITER_COUNT_NAME, INIT_NAME, CTX_SEPARATOR, ROOT_NAME,
            ROOT_CAT, START_METADATA_NAME, STOP_METADATA_NAME, dft_fn)
        from dftracer.python.ai_common import IO
        log = dftracer.initialize_log(TRACE, None, -1)
        assert (BLOCK_NAME, ITER_NAME, ITER_COUNT_NAME, INIT_NAME, CTX_SEPARATOR) == (
            "block", "iter", "count", "init", ".")
        assert (ROOT_NAME, ROOT_CAT, START_METADATA_NAME, STOP_METADATA_NAME) == (
            "ai_root", "ai_root", "start", "end")
        assert get_iter_block_name("x") == "x.block" == get_iter_block_name("x.block")
        assert get_iter_handle_name("x") == "x.iter" == get_iter_handle_name("x.iter")
        assert issubclass(ProfileCategory, StringEnum) and ProfileCategory.COMM == "comm"
        assert [str(e) for e in IOEvent] == ["open", "read", "write", "close"]
        assert ComputeEvent.FORWARD == "forward" and OtherEvent.LOG == "log"
        for cls, attr in ((Compute, "compute"), (Data, "data"), (DataLoader, "dataloader"),
                          (Communication, "comm"), (Device, "device"),
                          (Checkpoint, "checkpoint"), (Pipeline, "pipeline"), (Other, "other")):
            assert isinstance(getattr(ai, attr), cls), attr
        assert isinstance(ai.data.io, IO) and isinstance(ai, AI)
        def caller():
            return dft_fn("c", "").name, dft_fn("c").name
        assert caller() == ("caller", "caller")
        assert DFTracerAI(cat="custom", name="").name == "custom"
        assert DFTracerAI(cat="custom").name == "custom"
        assert ai.get_time() > 0 and ai.compute.profiler is ai.compute

        mine = AI(epoch=3)
        with mine.compute.forward:
            pass
        comp = Compute(step=7)
        comp.create_children({"fuse": "fused_op"})
        with comp.fuse:
            pass
        io = IO(cat="checkpoint", parent_name="ckpt")
        with io.write:
            pass
        with ai.data.preprocess.derive("collate"):
            pass

        @ai.data.item.init
        def setup():
            pass
        setup()
        for _ in ai.dataloader.fetch.iter(range(2)):
            pass
        for _ in ai.pipeline.epoch.iter(range(1), include_block=False, iter_name="wait"):
            pass
        ai.pipeline.train.start(metadata=True)
        ai.pipeline.train.stop(metadata=True)
        ai.checkpoint.capture.start()
        ai.checkpoint.capture.stop()
        empty = DFTracerAI(cat="solo", name="")
        with empty:
            pass
        log.finalize()
    """)
    got = {(e["name"], e["cat"]): own_args(e) for e in trace.user_events()}
    assert got[("forward", "compute")] == {"epoch": 3}
    assert got[("fused_op", "compute")] == {"step": 7}
    assert ("ckpt.io.write", "checkpoint") in got
    assert ("preprocess.collate", "data") in got
    assert ("item.init", "data") in got
    assert [own_args(e) for e in named(trace, "fetch.iter")] == [{"count": 1}, {"count": 2}]
    assert len(named(trace, "fetch.block")) == 2
    assert len(named(trace, "wait")) == 1 and named(trace, "epoch.block") == []
    assert ("capture", "checkpoint") in got
    assert ("solo", "solo") in got
    cm = {e["args"]["name"] for e in trace.of("M") if e["name"] == "CM"}
    assert {"train.start", "train.end"} <= cm


def test_logger_api_entities_and_metadata(tmp_path):
    trace, proc = traced(tmp_path, """
        import logging
        from dftracer.python import (dftracer, dft_fn, EntityRelation, EntityRole, EntityStore,
            TagValue, TagDType, TagType, get_time_scale, get_default_args)
        log = dftracer.initialize_log(TRACE, None, -1)
        assert dftracer.get_instance() is log and log.start_time > 0
        assert log.logger is not None and isinstance(log.dbg_logging, logging.Logger)
        assert log.get_config("DFTRACER_TIME_METRIC") == "US" and get_time_scale() == 1e6
        assert log.get_config("DFTRACER_ENABLE") == "1"
        log.mark_used("python_function")
        assert "python_function" in log._used_marks
        log.set_app_metadata_int("world", 8)
        log.set_app_metadata_string("model", "mlp")
        assert log.declare_entity("tensor", "w", EntityStore.GPU_MEMORY, "cuda:0") == 0
        log.declare_entity_type("tensor", EntityRole.PARAMETER, "weights")
        log.relate_entities(EntityRelation.CONTAINS, 1, 2)
        p = dft_fn("IO", "load")
        assert p.uses("file", "/a") == 0 and p.generates("tensor", "x") == 0
        assert p.relate(EntityRelation.USED, 0) is p
        assert p.relate_entity(EntityRelation.UPDATED, "t", "k") == 0
        p.flush()
        t = log.get_time()
        log.enter_event()
        log.log_event("tagged", "user", t, 3,
                      int_args={"n": TagValue(5, TagDType.INT, TagType.KEY).value(),
                                "big": (0, 2**40)},
                      float_args={"x": TagValue("2.5", TagDType.FLOAT).value()},
                      string_args={"s": TagValue(7).value()},
                      relations={EntityRelation.USED: [1]})
        log.exit_event()
        log.log_metadata_event("k", "v")
        assert get_default_args(lambda a, b=2, *, c="x": 0) == {"b": 2, "c": "x"}
        assert TagValue(3.7, TagDType.INT).value() == (0, 3)
        log.finalize()
    """)
    (ev,) = named(trace, "tagged")
    assert (ev["cat"], ev["ts"], ev["dur"], own_args(ev)) == ("user", ev["ts"], 3,
                                                             {"n": 5, "big": 2**40, "x": 2.5, "s": "7"})
    assert named(trace, "load")[0]["cat"] == "IO"
    cm = {e["args"]["name"]: e["args"]["value"] for e in trace.of("M") if e["name"] == "CM"}
    assert cm["world"] == "8" and cm["model"] == "mlp" and cm["k"] == "v"


def test_log_event_rejects_bad_relations():
    proc = run_python("""
        from dftracer.python import dftracer
        log = dftracer.initialize_log(None)
        try:
            log.log_event("a", "b", 0, 1, relations=[1])
        except TypeError as e:
            print(e)
    """, PLAIN)
    assert "relations" in proc.stdout


def test_native_library_module(tmp_path):
    trace, _ = traced(tmp_path, """
        import dftracer.dftracer as native
        import dftracer.dftracer_dbg as native_dbg
        from dftracer.python import profiler
        assert profiler is native and native_dbg.log_event is native.log_event
        native.initialize(TRACE, None, -1)
        t = native.get_time()
        assert native.enter_event() == 0
        # the native module's order: int_args, string_args, float_args
        native.log_event("native", "cat", t, 2, {"i": (0, 1)}, {"s": (0, "x")}, {"f": (0, 1.5)})
        native.exit_event()
        native.log_metadata_event("nk", "nv")
        native.mark_used("torch_profiler")
        native.set_app_metadata_int("a", 1)
        native.set_app_metadata_string("b", "c")
        assert native.get_config("DFTRACER_TIME_METRIC") == "US"
        native.finalize()
    """)
    (ev,) = named(trace, "native")
    assert own_args(ev) == {"i": 1, "s": "x", "f": 1.5}


def test_noop_profiler_and_helpers(tmp_path):
    log_file = tmp_path / "app.log"
    run_python(f"""
        import logging
        from dftracer.python import (NoOpProfiler, ProfilerProtocol, profiler, setup_logger,
            setup_stream_logger, DFTRACER_LOG_LEVEL)
        assert isinstance(profiler, NoOpProfiler)
        p = NoOpProfiler()
        p.initialize("x", None, -1)
        assert p.get_time() == 0 and p.get_config("k") == "" and p.declare_entity("a", "b", 0, "") == 0
        p.log_event("a", "b", 0, 1, {{}}, {{}}, {{}}, None)
        p.finalize()
        lg = setup_logger("mine", {str(log_file)!r}, "%(levelname)s %(message)s", logging.INFO)
        lg.info("hello")
        s = setup_stream_logger()
        assert s.name == "DFTRACER" and s.level == logging.WARN and DFTRACER_LOG_LEVEL == "WARN"
        assert setup_stream_logger() is s and len(s.handlers) == 1
    """, {**PLAIN, "DFTRACER_LOG_LEVEL": "WARN"})
    assert log_file.read_text() == "INFO hello\n"


def test_capture_signal_finalizes_and_exits_with_the_signal_number(tmp_path):
    proc = run_python(f"""
        import signal
        from dftracer.python import dftracer, dft_fn, capture_signal
        dftracer.initialize_log({str(tmp_path / 'sig.pfw')!r})
        with dft_fn("X", "before"):
            pass
        capture_signal(signal.SIGTERM, None)
    """, ENABLED, check=False)
    assert proc.returncode == 15
    trace = read_trace(find_traces(str(tmp_path), "sig")[0])  # has its end event
    assert len(named(trace, "before")) == 1


# ---- environment constants ----------------------------------------------------

ENV_PROBE = """
import json
import dftracer.python as dp
from dftracer.python import env
print(json.dumps([env.DFTRACER_ENABLE, env.DFTRACER_INIT_PRELOAD, env.DFTRACER_LOG_LEVEL,
                  dp.DFTRACER_ENABLE, dp.common.DFTRACER_ENABLE]))
"""


@pytest.mark.parametrize("env, expect", [
    ({}, [False, False, "ERROR"]),
    ({"DFTRACER_ENABLE": "1"}, [True, False, "ERROR"]),
    ({"DFTRACER_ENABLE": "0"}, [False, False, "ERROR"]),
    ({"DFTRACER_ENABLE": "TRUE", "DFTRACER_INIT": "PRELOAD"}, [True, True, "ERROR"]),
    ({"DFTRACER_INIT": "FUNCTION", "DFTRACER_LOG_LEVEL": "DEBUG"}, [False, False, "DEBUG"]),
])
def test_env_constants(env, expect):
    out = json.loads(run_python(ENV_PROBE, {**PLAIN, **env}).stdout)
    assert out == expect + [expect[0], expect[0]]
    assert [env.get("DFTRACER_ENABLE_ENV", "DFTRACER_ENABLE")] == ["DFTRACER_ENABLE"]


def test_constant_names():
    run_python("""
        from dftracer.python.env import (DFTRACER_ENABLE_ENV, DFTRACER_INIT_ENV,
            DFTRACER_LOG_LEVEL_ENV, DFTRACER_TIME_METRIC_ENV)
        assert (DFTRACER_ENABLE_ENV, DFTRACER_INIT_ENV, DFTRACER_LOG_LEVEL_ENV,
                DFTRACER_TIME_METRIC_ENV) == ("DFTRACER_ENABLE", "DFTRACER_INIT",
                "DFTRACER_LOG_LEVEL", "DFTRACER_TIME_METRIC")
    """, PLAIN)


def test_env_change_and_logger_reload(tmp_path):
    # A program turns tracing on after importing dftracer, reloads the logger
    # module as pydftracer programs do, and is traced.
    trace, proc = traced(tmp_path, """
        import importlib, sys
        import dftracer.python as dp
        from dftracer.python import dftracer, dft_fn, common
        from dftracer.python.common import NoOpProfiler
        assert dp.DFTRACER_ENABLE is False and isinstance(common.profiler, NoOpProfiler)
        os.environ["DFTRACER_ENABLE"] = "1"
        logger_mod = importlib.reload(sys.modules["dftracer.python.logger"])
        import dftracer.dftracer as native
        assert logger_mod.DFTRACER_ENABLE is True and logger_mod.profiler is native
        assert dp.env.DFTRACER_ENABLE and dp.common.DFTRACER_ENABLE and dp.DFTRACER_ENABLE
        assert common.profiler is native
        log = dftracer.initialize_log(TRACE)
        with dft_fn("X", "after_reload"):
            pass
        os.environ["DFTRACER_ENABLE"] = "0"
        importlib.reload(sys.modules["dftracer.python.logger"])
        assert not dp.DFTRACER_ENABLE and isinstance(common.profiler, NoOpProfiler)
        log.finalize()
    """, env={"DFTRACER_ENABLE": "0"})
    assert len(named(trace, "after_reload")) == 1


def test_dbg_is_the_same_api(tmp_path):
    trace, _ = traced(tmp_path, """
        import importlib
        import dftracer.python as dp
        import dftracer.python.torch as dpt
        importlib.import_module("dftracer.python.dbg.torch.profiler")
        importlib.import_module("dftracer.python.dbg.logger")
        from dftracer.python.dbg import dftracer, ai, dft_fn, logger
        from dftracer.python.dbg.torch import trace_handler
        assert ai is dp.ai and dft_fn is dp.dft_fn and dftracer is dp.dftracer
        assert trace_handler is dpt.trace_handler
        assert logger.name == "DFTRACER"
        log = dftracer.initialize_log(TRACE)

        @ai.compute.forward
        def fwd():
            pass
        fwd()
        log.finalize()
    """)
    assert [(e["name"], e["cat"]) for e in trace.user_events()] == [("forward", "compute")]


def test_torch_modules_keep_the_profiler_decorator():
    run_python("""
        import dftracer.python.torch as t
        from dftracer.python.torch import trace_handler, profiler, ProfilerContext
        decorator = t.profiler
        import dftracer.python.torch.profiler as sub
        import dftracer.python.torch.common as common
        assert sub.trace_handler is trace_handler is common.trace_handler
        assert t.common is common and common.get_time_scale() == 1e6
        # the submodule took the package attribute; it still is the decorator
        assert t.profiler is sub and callable(sub)
        @sub(enabled=False)
        def f(x):
            return x + 1
        assert f(1) == 2
    """, PLAIN)


def test_dynamo_names():
    pytest.importorskip("torch")
    run_python("""
        import torch
        from dftracer.python.dynamo import (Dynamo, dynamo, create_backend, CallStackRecord,
            create_detailed_op_name, TORCH_AVAILABLE, aot_autograd, make_boxed_func, CAT_DYNAMO)
        from dftracer.python import Dynamo as D2, create_backend as cb2
        assert D2 is Dynamo and cb2 is create_backend and TORCH_AVAILABLE and CAT_DYNAMO == "dynamo"
        assert callable(aot_autograd) and callable(make_boxed_func)
        assert isinstance(dynamo, Dynamo) and dynamo.count_parameters(torch.nn.Linear(2, 3)) == 9
        assert callable(create_backend(name="m", epoch=0, step=0, autograd=False))
        CallStackRecord("op", "call_function", "t", 1, False)
        gm = torch.fx.symbolic_trace(torch.nn.Sequential(torch.nn.ReLU()))
        node = [n for n in gm.graph.nodes if n.op == "call_module"][0]
        assert create_detailed_op_name(node, gm) == "0.ReLU_0"
        assert Dynamo(name="x").add_enhanced_timing_to_graph(gm) is gm
    """, PLAIN, timeout=300)
