"""Recorded neuron-monitor and neuron-ls outputs.

MONITOR_REPORT: one neuron-monitor report, assembled from the JSON fragments of AWS's "Neuron Monitor User Guide"
(aws-neuron/aws-neuron-sdk, tools/neuron-sys-tools/neuron-monitor-user-guide.rst at 1db4d74; the sections "The
JSON output format", instance_info, neuron_hardware_info, neuroncore_counters, execution_stats, memory_used,
neuron_hw_counters), values verbatim; the guide's `[...]` elisions are dropped so it parses, and the
neuroncore_memory_usage of cores 0 and 1 is its own.

NEURON_LS: `neuron-ls --json-output` captured on a trn1.2xlarge (aws-neuronx-dkms 2.26.5.0, aws-neuronx-tools
2.28.23.0), as recorded verbatim in the tests of Backend.AI's Neuron accelerator plugin. It has no driver or
firmware field: those are not in neuron-ls's JSON.
"""

from __future__ import annotations

import json

MONITOR_REPORT = {
    "neuron_runtime_data": [{
        "pid": 0, "address": "", "neuron_runtime_tag": "my_app_1", "error": "",
        "report": {
            "neuroncore_counters": {
                "period": 1.000113182,
                "neuroncores_in_use": {
                    "0": {"neuroncore_utilization": 42.01, "flops": 1234567891011,
                          "v3d": {"nc_v3.0": {"neuroncore_utilization": 21.01},
                                  "nc_v3.1": {"neuroncore_utilization": 63.01}}},
                    "1": {"neuroncore_utilization": 42.02, "flops": 1234567891021,
                          "v3d": {"nc_v3.2": {"neuroncore_utilization": 21.02},
                                  "nc_v3.3": {"neuroncore_utilization": 63.02}}},
                },
                "error": "",
            },
            "execution_stats": {
                "period": 1.030613214,
                "error_summary": {"generic": 0, "numerical": 0, "transient": 0, "model": 0, "runtime": 0,
                                  "hardware": 0},
                "execution_summary": {"completed": 123, "completed_with_err": 0, "completed_with_num_err": 0,
                                      "timed_out": 0, "incorrect_input": 0, "failed_to_queue": 0},
                "latency_stats": {
                    "total_latency": {"p0": 0.01100001, "p1": 0.01100002, "p25": 0.01100004, "p50": 0.01100008,
                                      "p75": 0.01100010, "p99": 0.01100012, "p100": 0.01100013},
                    "device_latency": {"p0": 0.01000001, "p1": 0.01000002, "p25": 0.01000004, "p50": 0.01000008,
                                       "p75": 0.01000010, "p99": 0.01000012, "p100": 0.01000013},
                },
                "error": "",
            },
            "memory_used": {
                "period": 1.00001,
                "neuron_runtime_used_bytes": {
                    "host": 6997643264, "neuron_device": 12519788544,
                    "usage_breakdown": {
                        "host": {"application_memory": 6996594688, "constants": 0, "dma_buffers": 1048576,
                                 "tensors": 0},
                        "neuroncore_memory_usage": {
                            "0": {"constants": 193986816, "model_code": 176285056, "model_shared_scratchpad": 0,
                                  "runtime_memory": 0, "tensors": 20971520},
                            "1": {"constants": 193986816, "model_code": 176285056, "model_shared_scratchpad": 0,
                                  "runtime_memory": 0, "tensors": 20971520},
                        },
                    },
                },
                "error": "",
            },
        },
    }],
    "system_data": {
        "neuron_hw_counters": {
            "period": 1.030359284,
            "neuron_devices": [{"neuron_device_index": 0, "mem_ecc_corrected": 0, "mem_ecc_uncorrected": 0,
                                "sram_ecc_uncorrected": 0, "sram_ecc_corrected": 0}],
            "error": "",
        },
    },
    "instance_info": {
        "instance_name": "My_Instance", "instance_id": "i-0011223344556677a", "instance_type": "trn2n.48xlarge",
        "instance_availability_zone": "us-west-2b", "instance_availability_zone_id": "usw2-az2",
        "instance_region": "us-west-2", "ami_id": "ami-0011223344556677b", "subnet_id": "subnet-112233ee",
        "error": "",
    },
    "neuron_hardware_info": {
        "neuron_device_type": "trainium2", "neuron_device_version": "v4", "neuroncore_version": "v3d",
        "neuron_device_count": 16, "neuron_device_memory_size": 103079215104, "neuroncore_per_device_count": 4,
        "logical_neuroncore_config": 2, "error": "",
    },
}
MONITOR_LINE = json.dumps(MONITOR_REPORT)

NEURON_LS = """
[
    {
        "neuron_device": 0,
        "bdf": "0000:00:1e.0",
        "cpu_affinity": "0-7",
        "numa_node": "-1",
        "connected_to": null,
        "nc_count": 2,
        "memory_size": 34359738368,
        "neuroncore_ids": [
            0,
            1
        ],
        "neuron_processes": []
    }
]
"""
